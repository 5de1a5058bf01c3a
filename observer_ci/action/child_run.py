"""The parent's half of the process boundary: what each ``observer-ci run`` child is told,
built once from the action's settings as :class:`RunOptions` and handed over as a JSON file
(``observer-ci run --config FILE``), never re-encoded as flags."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from observer_ci.action.settings import Settings
from observer_ci.core.run_options import RunOptions
from observer_ci.core.variants import TOLERANCE_METRICS

CONFIG_NAME = "run-options.json"  # next to the child's results.json and journal


def child_run_options(settings: Settings, threads: int | None = None) -> RunOptions:
    """The options every child of this job shares: timing, one tolerance set (the child's
    SUCCESS uses the thresholds the gate uses), the shared export cache, a thread budget.
    The child never gates (the parent does)."""
    cache_dir, cache_max_mb = None, None
    if settings.cache_dir:
        cache = Path(settings.cache_dir)
        cache = cache if cache.is_absolute() else Path(settings.workspace) / cache
        cache_dir = str(cache.resolve())  # the base runs in another directory
        cache_max_mb = settings.cache_max_mb
    return RunOptions(
        repeat=settings.repeat,
        atol=settings.thresholds.abs_max,
        rtol=settings.thresholds.rel_max,
        verbose=settings.verbose,
        cache_dir=cache_dir,
        cache_max_mb=cache_max_mb,
        threads=threads,
        gate=False,
        # the parent's policy file, by absolute path: the base runs in another directory
        policy=str(Path(settings.policy.path).resolve()) if settings.policy.path else None,
        variants=",".join(settings.variants),
        providers=",".join(settings.providers),
        thresholds=_variant_limits(settings),
        # the parent checked the head's paths (Settings.check_scripts); the base commit may
        # lack a script the pull request adds: that is a row of the base run, not exit 2
        missing_scripts="row",
        print_summary=False,
    )


def _variant_limits(settings: Settings) -> str:
    """The variants' tolerances as ``thresholds`` text (``fp16_abs_max=...``): the child
    judges each variant with the limits the gate uses."""
    return ",".join(
        f"{v}_{metric}={value!r}"
        for v in settings.variants
        for metric, value in zip(TOLERANCE_METRICS, settings.thresholds.variant_limits(v))
    )


def child_command(
    options: RunOptions, scripts: list[str], out: Path, label: str, journal: Path
) -> list[str]:
    """Writes this child's options into ``out`` and returns its command line."""
    run = dataclasses.replace(
        options, scripts=tuple(scripts), out=str(out), label=label, journal=str(journal)
    )
    config = run.write(out / CONFIG_NAME)
    return [sys.executable, "-m", "observer_ci", "run", "--config", str(config)]
