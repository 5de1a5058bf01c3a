"""Run a step in a forked copy of the process, so a crash of native code is a row, not the run.

onnxruntime can die on a graph it is handed (observed: a float16 LSTM segfaults while the CPU
session is created). A check that may meet such a graph runs here: the fork shares everything
already loaded (no import cost, the torch outputs are there), sends its value back through a
file, and a signal or an exit without a value becomes :class:`Crashed`. Where ``os.fork`` does
not exist (Windows) the step runs in this process.

The forked step must not run torch kernels (OpenMP pools do not survive a fork): compute what
needs torch before, in the parent.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from observer_ci.core.errors import error_tail

T = TypeVar("T")


@dataclass
class Crashed:
    """The step did not return: why, in words."""

    reason: str


def run_isolated(step: Callable[[], T], *, partial: bool = False) -> T | Crashed:
    """``step()`` in a fork; its exception or its death becomes :class:`Crashed`. With
    ``partial``, ``step`` appends values as it goes (:func:`run_isolated_steps`) and the
    list of them comes back, a :class:`Crashed` last when the fork died before returning."""
    if not hasattr(os, "fork"):  # pragma: no cover - Windows
        try:
            return step()
        except Exception as e:
            return Crashed(error_tail(e))
    fd, path = tempfile.mkstemp(prefix="observer-ci-", suffix=".pickle")
    os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child (coverage does not follow forks)
            if partial:
                _PARTIAL[:] = [path]
            _child(step, path + ".done" if partial else path)
        _, status = os.waitpid(pid, 0)
        if not partial:
            return _outcome(status, path)
        values = _partial_values(path)
        ended = _outcome(status, path + ".done")
        return values + [ended] if isinstance(ended, Crashed) else values  # type: ignore[return-value]
    finally:
        for leftover in (path, path + ".done"):
            if os.path.exists(leftover):
                os.unlink(leftover)


def _partial_values(path: str) -> list[Any]:
    values: list[Any] = []
    try:
        with open(path, "rb") as f:
            while True:
                kind, value = pickle.load(f)
                values.append(Crashed(value) if kind == "error" else value)
    except (OSError, EOFError, pickle.UnpicklingError):
        pass
    return values


def run_isolated_steps(steps: list[Callable[[], Any]]) -> list[Any]:
    """Every step in turn in one fork (a fork costs about 0.1 s with torch loaded), each
    value written as soon as it is there; a step that kills the fork becomes
    :class:`Crashed` and the steps after it go on in a new fork."""
    results: list[Any] = []
    while len(results) < len(steps):
        rest = steps[len(results) :]
        done = run_isolated(lambda rest=rest: _steps_in_turn(rest), partial=True)
        results.extend(done[:-1] if isinstance(done[-1], Crashed) else done)
        if isinstance(done[-1], Crashed):
            results.append(done[-1])
    return results


def _steps_in_turn(steps: list[Callable[[], Any]]) -> None:  # pragma: no cover - in the fork
    for step in steps:
        try:
            value: Any = ("value", step())
        except Exception as e:
            value = ("error", error_tail(e))
        _append(value)


_PARTIAL: list[str] = []  # the fork's file for partial values (set in the child only)


def _append(value: Any) -> None:  # pragma: no cover - in the fork
    with open(_PARTIAL[0], "ab") as f:
        pickle.dump(value, f)


def _child(step: Callable[[], Any], path: str) -> None:  # pragma: no cover - in the fork
    import faulthandler

    faulthandler.disable()  # a crash is reported once, as the row's reason, not as a dump
    code = 0
    try:
        try:
            value: Any = ("value", step())
        except BaseException as e:
            value = ("error", error_tail(e))
        with open(path, "wb") as f:
            pickle.dump(value, f)
    except BaseException:
        code = 3
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _outcome(status: int, path: str) -> Any:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return Crashed(f"onnxruntime crashed ({name}): the process died, no Python error")
    try:
        with open(path, "rb") as f:
            kind, value = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        return Crashed(f"the check exited with status {os.waitstatus_to_exitcode(status)}")
    return Crashed(value) if kind == "error" else value
