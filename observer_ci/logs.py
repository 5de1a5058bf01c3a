"""The package's one logger: ``[observer-ci] message`` lines on stderr.

Every module logs through :data:`logger` (or a child of it); nothing else prints progress.
Text in a log line is kept on one line so untrusted content cannot start a workflow
command on a line of its own.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("observer_ci")
_PREFIX = "[observer-ci] "


class _OneLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return _PREFIX + text.replace("\r", "\\r").replace("\n", "\\n")


def configure(level: int = logging.INFO) -> None:
    """Sends the package's records to stderr (idempotent; call once per process)."""
    if any(getattr(h, "_observer_ci", False) for h in logger.handlers):
        logger.setLevel(level)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter("%(message)s"))
    handler._observer_ci = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def progress(message: str) -> None:
    """One progress line (the pipeline's default ``progress`` callback)."""
    configure()
    logger.info(message)
