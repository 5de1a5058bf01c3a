"""What ``observer-ci run`` is told: one typed object across the process boundary.

The action's parent builds it once from its settings and hands it to the child as a JSON file
(``observer-ci run --config FILE``); the command line builds the same object from its flags.
The child turns it into its :class:`observer_ci.pipeline.config.RunConfig`. A new child-side
input is a field here, its flag in ``cli.py`` (if any), and its consumer.

Torch-free: the defaults and the checks of every value live here, once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from observer_ci.core.exceptions import RunOptionsError


def parse_cache_max_mb(text: str) -> int:
    """A cache size cap in MB from text: a whole number >= 0 (0: no cap). The message of the
    ``ValueError`` reads after the name of the input, flag or variable."""
    text = text.strip()
    if not text.isdigit():
        raise ValueError(f"must be a whole number of MB (0: no cap), got {text!r}")
    return int(text)


MISSING_SCRIPTS = ("error", "row")  # RunOptions.missing_scripts


@dataclass(frozen=True)
class RunOptions:
    """Every option of ``observer-ci run``; the field defaults are the command's defaults."""

    scripts: tuple[str, ...] = ()  # observation scripts, globs allowed (the child expands them)
    out: str = "observer-ci-out"
    label: str = ""  # shown only when given (a matrix leg's name, "base")
    baseline: str | None = None  # results.json of the base to compare with
    thresholds: str = ""  # the gate's thresholds, as `--thresholds` takes them
    fail_on: str = "default"
    atol: float | None = None  # None: the thresholds' abs_max
    rtol: float | None = None  # None: the thresholds' rel_max
    warmup: int = 2
    repeat: int = 10
    verbose: bool = False
    probe: bool = True
    merge_decoders: bool = True
    cache_dir: str | None = None  # None: $OBSERVER_CI_CACHE_DIR, else no cache
    cache_max_mb: int | None = None  # None: $OBSERVER_CI_CACHE_MAX_MB, else the default
    threads: int | None = None
    save_feeds: bool = False
    reverse_order: bool = False
    gate: bool = True  # False: exit 0 once the results are written (`--no-gate`)
    journal: str | None = None
    policy: str | None = None  # the policy file (None: .observer-ci.yml here when present)
    bundles: str = "failing"  # reproducer bundles: "failing", "all" or "none"
    history_runs: int = 20  # with a history:DIR baseline, the most recent runs used
    variants: str = ""  # fp16,int8,optimized or all (core.variants), as `--variants` takes it
    providers: str = "cpu"  # onnxruntime providers, as `--providers` takes it
    # a script path or glob naming no readable file: "error" (exit 2 before anything runs) or
    # "row" (a script_failed row: the base commit may lack a script the pull request adds)
    missing_scripts: str = "error"
    # print each model's status and the files written (the action's children do not: their
    # files are the parent's input, the parent says what it wrote)
    print_summary: bool = True

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), _FIELD_TYPES[f.name])
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if value is not None and not value >= 0:  # NaN too
                raise RunOptionsError(f"--{name} must be >= 0, got {value!r}")
        if self.bundles not in ("failing", "all", "none"):
            raise RunOptionsError(f"--bundles must be failing, all or none, got {self.bundles!r}")
        if self.missing_scripts not in MISSING_SCRIPTS:
            raise RunOptionsError(
                f"--missing-scripts must be error or row, got {self.missing_scripts!r}"
            )
        if self.history_runs < 1:
            raise RunOptionsError(f"--history-runs must be >= 1, got {self.history_runs}")
        if self.cache_max_mb is not None and self.cache_max_mb < 0:
            raise RunOptionsError(f"--cache-max-mb must be >= 0, got {self.cache_max_mb}")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "scripts": list(self.scripts)}

    @classmethod
    def from_json(cls, data: Any) -> RunOptions:
        """Strict: unknown keys and values of the wrong type raise :class:`RunOptionsError`."""
        if not isinstance(data, dict):
            raise RunOptionsError("run options must be a JSON object")
        unknown = sorted(set(data) - set(_FIELD_TYPES))
        if unknown:
            raise RunOptionsError(f"unknown run option(s): {', '.join(map(str, unknown))}")
        values = dict(data)
        if isinstance(values.get("scripts"), list):
            values["scripts"] = tuple(values["scripts"])
        for name in ("atol", "rtol"):  # JSON writes 0.0 as 0.0, a person may write 0
            if type(values.get(name)) is int:
                values[name] = float(values[name])
        return cls(**values)

    def write(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunOptions:
        """The options in a JSON file; ``OSError`` when unreadable, else RunOptionsError."""
        text = Path(path).read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except ValueError as e:
            raise RunOptionsError(f"{path}: not JSON: {e}") from e
        try:
            return cls.from_json(data)
        except TypeError as e:  # a missing/extra argument the checks above did not name
            raise RunOptionsError(f"{path}: {e}") from e
        except RunOptionsError as e:
            raise RunOptionsError(f"{path}: {e}") from e


def _runtime_types(hint: Any) -> tuple[type, ...]:
    """``str | None`` -> ``(str, NoneType)``; ``tuple[str, ...]`` -> ``(tuple,)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(typing.get_origin(a) or a for a in typing.get_args(hint))
    return (typing.get_origin(hint) or hint,)


# what each field may hold, from its annotation
_FIELD_TYPES = {
    name: _runtime_types(hint) for name, hint in typing.get_type_hints(RunOptions).items()
}


def _check_type(name: str, value: Any, allowed: tuple[type, ...]) -> None:
    is_bool = isinstance(value, bool)  # a bool is an int to isinstance, not to us
    if not isinstance(value, allowed) or (is_bool and bool not in allowed):
        wanted = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
        raise RunOptionsError(f"run option {name!r} must be {wanted}, got {value!r}")
    if isinstance(value, tuple) and not all(isinstance(s, str) for s in value):
        raise RunOptionsError(f"run option 'scripts' must be a list of paths, got {value!r}")
