"""The payload a pull-request job leaves for a later publishing job, and its validation.

Two-step mode for forks: the pull-request job (read-only token) writes a small directory
(``payload.json``, ``results.json``, ``base-results.json``) that the workflow uploads as
an artifact; a ``workflow_run`` job with a write token downloads it and publishes.
Everything in it was produced by code of the pull request, so the reader trusts nothing:
only regular files with known names are read (no symlinks, no names taken from the
payload), sizes are capped before reading, every field is type-checked against the
results schema, and the report is re-rendered from ``results.json`` (a ``report.md`` in
the artifact is never read).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from observer_ci.action.settings import KEY_RE
from observer_ci.core.results import (
    STATUSES,
    Cause,
    ExportResult,
    GraphResult,
    GraphWarning,
    InputInfo,
    ModelResult,
    ObservationResult,
    PairedLatency,
    ProbeResult,
    RunResults,
    VariantResult,
)
from observer_ci.report.rules import RULES, Thresholds, parse_fail_on, parse_thresholds

PAYLOAD_FORMAT = "observer-ci-payload"
PAYLOAD_VERSION = 1
PAYLOAD_FILE = "payload.json"
RESULTS_FILE = "results.json"
BASE_RESULTS_FILE = "base-results.json"
MAX_PAYLOAD_BYTES = 16 * 1024
MAX_RESULTS_BYTES = 8 * 1024 * 1024  # one results.json (a big run is well under 1 MB)
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # all parts together
MAX_PARTS = 64  # matrix legs published in one comment
_SHA_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_RUN_ID_RE = re.compile(r"^[0-9]{1,20}$")
_NON_FINITE = ("nan", "inf", "-inf")  # how results.json spells them


class ArtifactError(ValueError):
    """The payload is missing, too large, malformed or inconsistent: nothing is posted."""


class NoPayloadError(ArtifactError):
    """No ``payload.json`` at all (the pull-request job did not get that far)."""


@dataclass(frozen=True)
class Payload:
    """What the comment needs besides the results."""

    pr_number: int | None
    head_sha: str
    run_id: str
    comment_key: str = ""
    label: str = ""
    thresholds: Thresholds = dataclasses.field(default_factory=Thresholds)
    fail_on: frozenset[str] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PAYLOAD_FORMAT,
            "version": PAYLOAD_VERSION,
            "pr_number": self.pr_number,
            "head_sha": self.head_sha,
            "run_id": self.run_id,
            "comment_key": self.comment_key,
            "label": self.label,
            "thresholds": dataclasses.asdict(self.thresholds),
            "fail_on": sorted(self.fail_on),
        }


@dataclass(frozen=True)
class Part:
    """One validated payload directory: a matrix leg, or the only job."""

    payload: Payload
    head: RunResults
    base: RunResults | None
    where: str  # the directory name, for messages


# -- writing (the pull-request job) ---------------------------------------------------


def write_payload(
    directory: Path, payload: Payload, head: RunResults, base: RunResults | None
) -> Path:
    """Writes the payload directory (replacing files of an earlier payload there)."""
    directory.mkdir(parents=True, exist_ok=True)
    head.write(directory / RESULTS_FILE)
    base_path = directory / BASE_RESULTS_FILE
    if base is not None:
        base.write(base_path)
    else:
        base_path.unlink(missing_ok=True)
    text = json.dumps(payload.to_dict(), indent=2)
    (directory / PAYLOAD_FILE).write_text(text, encoding="utf-8")
    return directory


# -- reading (the publishing job) -----------------------------------------------------


def read_parts(root: Path) -> list[Part]:
    """Every payload under ``root`` (``root`` itself, or one per direct subdirectory, as
    ``actions/download-artifact`` lays out several artifacts), validated."""
    if not root.is_dir() or root.is_symlink():
        raise NoPayloadError(f"no payload directory at {root}")
    if _is_regular(root / PAYLOAD_FILE):
        directories = [root]
    else:
        directories = [
            Path(entry.path)
            for entry in sorted(os.scandir(root), key=lambda e: e.name)
            if entry.is_dir(follow_symlinks=False) and _is_regular(Path(entry.path) / PAYLOAD_FILE)
        ]
    if not directories:
        raise NoPayloadError(f"no {PAYLOAD_FILE} in {root} or its subdirectories")
    if len(directories) > MAX_PARTS:
        raise ArtifactError(f"{len(directories)} payloads, more than the {MAX_PARTS} allowed")
    budget = [MAX_TOTAL_BYTES]
    return [_read_part(d, budget) for d in directories]


def _read_part(directory: Path, budget: list[int]) -> Part:
    where = directory.name or str(directory)
    payload = parse_payload(_read_json(directory / PAYLOAD_FILE, MAX_PAYLOAD_BYTES, budget))
    head = parse_results(_read_json(directory / RESULTS_FILE, MAX_RESULTS_BYTES, budget), where)
    base_path = directory / BASE_RESULTS_FILE
    base = None
    if base_path.exists() or base_path.is_symlink():
        base = parse_results(_read_json(base_path, MAX_RESULTS_BYTES, budget), where)
    return Part(payload=payload, head=head, base=base, where=where)


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _read_json(path: Path, limit: int, budget: list[int]) -> Any:
    """Reads a regular file (never through a symlink) of at most ``limit`` bytes."""
    name = f"{path.parent.name}/{path.name}"
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ArtifactError(f"{name} is missing") from None
    if not stat.S_ISREG(info.st_mode):
        raise ArtifactError(f"{name} is not a regular file (a link or a directory)")
    if info.st_size > limit:
        raise ArtifactError(f"{name} is {info.st_size} bytes, over the {limit}-byte limit")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ArtifactError(f"{name} grew over the {limit}-byte limit while being read")
    budget[0] -= len(data)
    if budget[0] < 0:
        raise ArtifactError(f"the payloads together exceed {MAX_TOTAL_BYTES} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ArtifactError(f"{name} is not valid JSON: {type(e).__name__}") from None


def parse_payload(data: Any) -> Payload:
    """A :class:`Payload` from untrusted JSON, or :class:`ArtifactError` saying what is wrong."""
    if not isinstance(data, dict):
        raise ArtifactError(f"{PAYLOAD_FILE} is not a JSON object")
    if data.get("format") != PAYLOAD_FORMAT or data.get("version") != PAYLOAD_VERSION:
        raise ArtifactError(
            f"{PAYLOAD_FILE} is not an {PAYLOAD_FORMAT} version {PAYLOAD_VERSION} payload"
        )
    pr = data.get("pr_number")
    if pr is not None and (type(pr) is not int or pr <= 0):
        raise ArtifactError("pr_number must be a positive integer or null")
    head_sha = data.get("head_sha")
    if not isinstance(head_sha, str) or not _SHA_RE.match(head_sha):
        raise ArtifactError("head_sha must be a full lowercase hex commit SHA")
    run_id = data.get("run_id")
    if not isinstance(run_id, str) or not _RUN_ID_RE.match(run_id):
        raise ArtifactError("run_id must be a string of digits")
    words = {}
    for name in ("comment_key", "label"):
        value = data.get(name, "")
        if not isinstance(value, str) or (value and not KEY_RE.match(value)):
            raise ArtifactError(f"{name} must be 1-64 letters, digits, '.', '_' or '-'")
        words[name] = value
    return Payload(
        pr_number=pr,
        head_sha=head_sha,
        run_id=run_id,
        thresholds=_thresholds(data.get("thresholds")),
        fail_on=_fail_on(data.get("fail_on")),
        **words,
    )


def _thresholds(data: Any) -> Thresholds:
    if not isinstance(data, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in data.values()
    ):
        raise ArtifactError("thresholds must be an object of numbers")
    try:  # the one threshold parser checks names and values
        return parse_thresholds(",".join(f"{k}={float(v)!r}" for k, v in data.items()))
    except ValueError as e:
        raise ArtifactError(f"thresholds: {e}") from None


def _fail_on(data: Any) -> frozenset[str]:
    if not isinstance(data, list) or not all(isinstance(v, str) and v in RULES for v in data):
        raise ArtifactError("fail_on must be a list of rule names")
    return frozenset(parse_fail_on(",".join(data) or "none"))


def parse_results(data: Any, where: str) -> RunResults:
    """A :class:`RunResults` from untrusted JSON whose every field has its schema type."""
    try:
        _check_dataclass(RunResults, data, "results")
        for i, model in enumerate(data.get("models", [])):
            if model["status"] not in STATUSES:
                raise ArtifactError(f"results.models[{i}].status is not a known status")
        return RunResults.from_dict(data)
    except ArtifactError as e:
        raise ArtifactError(f"{where}: {e}") from None
    except (ValueError, TypeError, KeyError) as e:
        raise ArtifactError(f"{where}: results.json: {e}") from None


# -- schema check driven by the results dataclasses ------------------------------------

_SCHEMA_CLASSES = (
    RunResults,
    ModelResult,
    InputInfo,
    ExportResult,
    ObservationResult,
    ProbeResult,
    Cause,
    GraphWarning,
    PairedLatency,
    GraphResult,
    VariantResult,
)


def _check_dataclass(cls: type, data: Any, path: str) -> None:
    if not isinstance(data, dict):
        raise ArtifactError(f"{path} must be an object")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in data:
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required:
                raise ArtifactError(f"{path}.{f.name} is missing")
            continue
        _check(data[f.name], hints[f.name], f"{path}.{f.name}")


def _check(value: Any, hint: Any, path: str) -> None:
    if not _matches(value, hint, path):
        raise ArtifactError(f"{path} has the wrong type")


def _matches(value: Any, hint: Any, path: str) -> bool:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches_quietly(value, arg, path) for arg in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return type(value) is int
    if hint is float:
        return type(value) in (int, float) or value in _NON_FINITE
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        if not isinstance(value, list):
            return False
        for i, item in enumerate(value):
            _check_item(item, args[0], f"{path}[{i}]")
        return True
    if origin is dict:
        if not isinstance(value, dict):
            return False
        for key, item in value.items():
            _check_item(item, args[1], f"{path}[{key!r:.40}]")
        return True
    if hint in _SCHEMA_CLASSES:
        _check_dataclass(hint, value, path)
        return True
    raise AssertionError(f"no schema check for {hint!r}")  # a new field type in results.py


def _check_item(value: Any, hint: Any, path: str) -> None:
    if not _matches(value, hint, path):
        raise ArtifactError(f"{path} has the wrong type")


def _matches_quietly(value: Any, hint: Any, path: str) -> bool:
    try:
        return _matches(value, hint, path)
    except ArtifactError:
        return False
