"""What the child's checks are configured with (tolerances, timing, cache)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from observer_ci.core.constants import FEEDS_MAX_BYTES, MIN_TIMED_RUNS, TORCH_MIN_TIMED_RUNS
from observer_ci.core.run_options import RunOptions
from observer_ci.core.tolerances import OutputTolerance
from observer_ci.core.variants import (
    DEFAULT_PROVIDERS,
    FLOAT32,
    VARIANT_TOLERANCES,
    parse_providers,
    parse_variants,
)
from observer_ci.pipeline.export_cache import (
    DEFAULT_CACHE_MAX_MB,
    MB,
    resolve_cache_dir,
    resolve_cache_max_bytes,
)
from observer_ci.report.policy import Policy
from observer_ci.report.rules import Thresholds

Progress = Callable[[str], None]


@dataclass
class RunConfig:
    """Tolerances and timing of the checks. The tolerances are the ``abs_max`` and
    ``rel_max`` thresholds: one set decides SUCCESS and the ``discrepancy`` rule."""

    atol: float = Thresholds.abs_max
    rtol: float = Thresholds.rel_max
    hist: tuple[float, ...] = (0.1, 0.01)
    warmup: int = 2
    repeat: int = 10  # at most; fewer once a call has used its time budget
    time_budget_s: float | None = 1.0  # per call and engine (None: always ``repeat`` runs)
    torch_threads: int | None = 1  # torch timed with one thread (None: torch's default)
    probe: bool = True
    cache_dir: str | None = None  # export cache shared by runs (None: no cache)
    cache_max_bytes: int | None = DEFAULT_CACHE_MAX_MB * MB  # its size cap (None: no cap)
    threads: int | None = None  # onnxruntime intra-op threads (None: its default)
    save_feeds: bool = False  # save the onnxruntime inputs for paired base/head timing
    merge_decoders: bool = True  # decoder_model_merged.onnx when a decoder has two families
    feeds_max_bytes: int = FEEDS_MAX_BYTES  # all saved inputs of the run together
    # (model name glob, abs_max, rel_max) from the policy file: later entries win
    model_tolerances: tuple[tuple[str, float | None, float | None], ...] = ()
    # the policy file's (model glob, output glob, abs_max, rel_max) and (model glob, reason)
    model_output_tolerances: tuple[tuple[str, str, float | None, float | None], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    outputs: tuple[OutputTolerance, ...] = ()  # this model's, set by for_model
    bundles: str = "failing"  # reproducer bundles: for failing graphs, all graphs, or none

    @classmethod
    def from_options(
        cls,
        options: RunOptions,
        thresholds: Thresholds,
        model_tolerances: tuple[tuple[str, float | None, float | None], ...] = (),
        *,
        policy: Policy | None = None,
    ) -> RunConfig:
        """The child's config from its run options; ``thresholds`` are the gate's, with
        ``atol``/``rtol`` applied, ``model_tolerances`` the policy file's per model, its
        skips and per-output tolerances from ``policy``. The cache
        falls back on its variables here, in the child's environment; a malformed one raises
        ``ValueError``."""
        cache_dir = resolve_cache_dir(options.cache_dir)
        variants = parse_variants(options.variants)
        return cls(
            atol=thresholds.abs_max,
            rtol=thresholds.rel_max,
            warmup=options.warmup,
            repeat=options.repeat,
            probe=options.probe,
            merge_decoders=options.merge_decoders,
            cache_dir=str(cache_dir) if cache_dir else None,
            cache_max_bytes=resolve_cache_max_bytes(options.cache_max_mb),
            threads=options.threads,
            torch_threads=options.threads or 1,
            save_feeds=options.save_feeds,
            model_tolerances=model_tolerances,
            model_output_tolerances=tuple(policy.output_tolerances()) if policy else (),
            skipped=tuple(policy.skips()) if policy else (),
            bundles=options.bundles,
            variants=variants,
            providers=parse_providers(options.providers),
            variant_tolerances={v: thresholds.variant_limits(v) for v in variants},
        )

    variants: tuple[str, ...] = ()  # core.variants: fp16, int8, optimized (pipeline/variants.py)
    providers: tuple[str, ...] = DEFAULT_PROVIDERS  # core.variants.PROVIDERS keys
    variant_tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)  # overrides

    def variant_limits(self, variant: str) -> tuple[float, float]:
        """``(abs_max, rel_max)`` of a variant: float32 is the graph's own tolerances."""
        if variant == FLOAT32:
            return self.atol, self.rtol
        return self.variant_tolerances.get(variant, VARIANT_TOLERANCES[variant])

    def recorded(self) -> dict[str, object]:
        """What ``results.json`` records under ``settings``."""
        return {
            "abs_max": self.atol,
            "rel_max": self.rtol,
            "hist": list(self.hist),
            "warmup": self.warmup,
            "repeat": self.repeat,
            "time_budget_s": self.time_budget_s,
            "min_timed_runs": {"onnxruntime": MIN_TIMED_RUNS, "torch": TORCH_MIN_TIMED_RUNS},
            "torch_threads": self.torch_threads,
            "ort_threads": self.threads,
            "probe": self.probe,
            **({"variants": list(self.variants)} if self.variants else {}),
            **({"providers": list(self.providers)} if self.providers != DEFAULT_PROVIDERS else {}),
        }

    def for_model(self, name: str) -> RunConfig:
        """This config with the tolerances the policy file gives model ``name`` (its
        own, and its outputs')."""
        import dataclasses
        import fnmatch

        atol, rtol = self.atol, self.rtol
        for pattern, abs_max, rel_max in self.model_tolerances:
            if fnmatch.fnmatchcase(name, pattern):
                atol = atol if abs_max is None else abs_max
                rtol = rtol if rel_max is None else rel_max
        outputs = tuple(
            (output, a, r)
            for pattern, output, a, r in self.model_output_tolerances
            if fnmatch.fnmatchcase(name, pattern)
        )
        if (atol, rtol, outputs) == (self.atol, self.rtol, self.outputs):
            return self
        return dataclasses.replace(self, atol=atol, rtol=rtol, outputs=outputs)

    def skip_reason(self, name: str) -> str | None:
        """Why the policy file skips model ``name`` (the last matching entry), else None."""
        import fnmatch

        reasons = [why for pattern, why in self.skipped if fnmatch.fnmatchcase(name, pattern)]
        return reasons[-1] if reasons else None
