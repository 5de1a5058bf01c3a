"""The run journal: what the observer child has finished so far, one JSON line per event.

``observer-ci run --journal PATH`` appends a ``begin`` line (the expanded script list and
the run's environment), then for each script a ``start`` line and, once its models are
processed, a ``done`` line with their rows. The action reads it when the child dies
(a hang killed at the timeout, ``os._exit``, the OOM killer): the finished scripts keep
their rows, the running one gets a failure row, the rest run in a new child.
Torch-free: the action parent reads it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from observer_ci.core.results import ModelResult, RunResults


class JournalWriter:
    """Appends events; every line is flushed and synced before the script it announces
    runs, so a crash right after still leaves it on disk."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def begin(self, results: RunResults, scripts: list[str]) -> None:
        self._append({"event": "begin", "scripts": scripts, "results": results.to_dict()})

    def start(self, script: str) -> None:
        self._append({"event": "start", "script": script})

    def done(self, script: str, models: list[ModelResult]) -> None:
        self._append({"event": "done", "script": script, "results": RunResults(models).to_dict()})

    def _append(self, event: dict) -> None:
        line = json.dumps(event, allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


@dataclass
class JournalState:
    """What a (possibly cut short) journal says."""

    scripts: list[str] | None = None  # None: the child died before it began
    header: RunResults | None = None  # environment, label, created_at
    done: list[str] = field(default_factory=list)
    models: list[ModelResult] = field(default_factory=list)
    running: str | None = None  # started, never done
    problems: list[str] = field(default_factory=list)  # unreadable lines

    @property
    def not_started(self) -> list[str]:
        if self.scripts is None:
            return []
        seen = set(self.done) | ({self.running} if self.running else set())
        return [s for s in self.scripts if s not in seen]


def read_journal(path: str | os.PathLike[str]) -> JournalState:
    """Parses what was written; a torn or malformed line is a problem, never an exception."""
    state = JournalState()
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return state
    except OSError as e:
        state.problems.append(f"journal unreadable: {e}")
        return state
    for number, line in enumerate(lines, 1):
        try:
            _apply(state, json.loads(line))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            state.problems.append(f"journal line {number} unreadable: {type(e).__name__}: {e}")
    return state


def _apply(state: JournalState, event: dict) -> None:
    kind = event["event"]
    if kind == "begin":
        scripts = event["scripts"]
        if not isinstance(scripts, list) or not all(isinstance(s, str) for s in scripts):
            raise ValueError("scripts must be a list of strings")
        state.scripts = scripts
        state.header = RunResults.from_dict(event["results"])
    elif kind == "start":
        state.running = str(event["script"])
    elif kind == "done":
        models = RunResults.from_dict(event["results"]).models
        state.models.extend(models)
        state.done.append(str(event["script"]))
        if state.running == event["script"]:
            state.running = None
    else:
        raise ValueError(f"unknown event {kind!r}")
