"""The package logger's state, kept across a call of the action in this process.

``observer_ci.core.logs.configure`` sets the package logger up for a process of its own (a
handler on the ``sys.stderr`` of that moment, ``propagate`` off). A test that calls
``observer_ci.action.main.main`` in-process would leave that behind: later ``caplog`` users
would see no records, and later redirected ``stderr`` no log lines. Every in-process call of
the action goes through :func:`package_logger_kept`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def package_logger_kept() -> Iterator[None]:
    """Restores the ``observer_ci`` logger's handlers, ``propagate`` and level on exit."""
    package = logging.getLogger("observer_ci")
    handlers, propagate, level = list(package.handlers), package.propagate, package.level
    try:
        yield
    finally:
        package.handlers[:] = handlers
        package.propagate = propagate
        package.setLevel(level)
