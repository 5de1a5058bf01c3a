"""What one observation script may change for the next ones, and putting it back."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# interval timers a script may leave armed: SIGALRM/SIGVTALRM/SIGPROF in a later script
_TIMERS = tuple(
    getattr(signal, name)
    for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
    if hasattr(signal, name)
)


@dataclass(frozen=True)
class ScriptState:
    """The working directory, the environment, ``sys.path``, ``sys.argv``, the standard
    streams, the umask, the signal handlers and the recursion limit. Captured once before the
    first script; :meth:`restored` puts it back before a script runs and again after it (its
    models are processed in the same state), and disarms the interval timers it left, so
    ``os.chdir``, ``sys.path.insert``, ``os.environ[...] = ...``, ``signal.alarm`` in one
    script never reach another."""

    cwd: str
    environ: dict[str, str]
    path: list[str]
    argv: list[str]
    streams: tuple[Any, Any]
    umask: int
    handlers: dict[int, Any]
    recursion_limit: int

    @classmethod
    def capture(cls) -> ScriptState:
        umask = os.umask(0o022)
        os.umask(umask)
        return cls(
            cwd=os.getcwd(),
            environ=dict(os.environ),
            path=list(sys.path),
            argv=list(sys.argv),
            streams=(sys.stdout, sys.stderr),
            umask=umask,
            handlers=_handlers(),
            recursion_limit=sys.getrecursionlimit(),
        )

    def restore(self) -> None:
        with contextlib.suppress(OSError):  # the directory itself removed: nothing to go back to
            os.chdir(self.cwd)
        if dict(os.environ) != self.environ:
            os.environ.clear()  # os.environ also calls unsetenv/putenv: C code sees it too
            os.environ.update(self.environ)
        sys.path[:] = self.path
        sys.argv = list(self.argv)
        sys.stdout, sys.stderr = self.streams
        os.umask(self.umask)
        for timer in _TIMERS:
            signal.setitimer(timer, 0)
        for number, handler in self.handlers.items():
            if signal.getsignal(number) is not handler:
                with contextlib.suppress(OSError, ValueError, TypeError):
                    signal.signal(number, handler)
        sys.setrecursionlimit(self.recursion_limit)

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        self.restore()
        try:
            yield
        finally:
            self.restore()


def _handlers() -> dict[int, Any]:
    """The Python-level handler of every signal that has one (None: set outside Python)."""
    handlers = {}
    for number in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            handler = signal.getsignal(number)
            if handler is not None:
                handlers[int(number)] = handler
    return handlers
