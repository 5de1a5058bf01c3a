"""The package's one logger: ``[observer-ci] message`` lines on stderr.

Every module logs through :data:`logger` (or a child of it); nothing else prints progress.
Text in a log line is kept on one line so untrusted content cannot start a workflow
command on a line of its own.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

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
    """One progress line with the time elapsed (the pipeline's default ``progress`` callback)."""
    configure()
    logger.info("%s %s", elapsed(), message)


# -- the child's job log: groups, elapsed time, quiet third-party libraries -------------------

# Loggers of libraries that warn on every export (e.g. "torchvision is not installed").
THIRD_PARTY_LOGGERS = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "transformers")
THIRD_PARTY_MODULES = r"(torch|onnx|onnxscript|onnxruntime|onnx_ir|transformers|copyreg)(\.|$)"
_START = time.perf_counter()


def elapsed() -> str:
    """``+12.3s``: the time since this process loaded the package's logger."""
    return f"+{time.perf_counter() - _START:.1f}s"


def command_data(text: str) -> str:
    """``text`` safe as the data of a workflow command (one line, ``%`` kept literal)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


@contextmanager
def log_group(title: str) -> Iterator[None]:
    """A collapsible ``::group::`` in the GitHub job log; nothing outside GitHub Actions.
    The title may carry untrusted names: it is escaped as command data."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        yield
        return
    print(f"::group::{command_data(title)}", file=sys.stderr, flush=True)
    try:
        yield
    finally:
        print("::endgroup::", file=sys.stderr, flush=True)


@contextmanager
def quiet_third_party(verbose: bool = False) -> Iterator[None]:
    """Silences library deprecation notices and warning logs unless ``verbose``."""
    if verbose:
        yield
        return
    saved = {name: logging.getLogger(name).level for name in THIRD_PARTY_LOGGERS}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", module=THIRD_PARTY_MODULES)
        for name in THIRD_PARTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
        try:
            yield
        finally:
            for name, level in saved.items():
                logging.getLogger(name).setLevel(level)
