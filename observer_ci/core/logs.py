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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr

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
# "torch" covers its children without a level of their own (torch.fx's symbolic shapes).
THIRD_PARTY_LOGGERS = (
    "torch",
    "torch.onnx",
    "torch.export",
    "torch._dynamo",
    "onnxscript",
    "transformers",
)
THIRD_PARTY_MODULES = r"(torch|onnx|onnxscript|onnxruntime|onnx_ir|transformers|copyreg)(\.|$)"
_START = time.perf_counter()


def elapsed() -> str:
    """``+12.3s``: the time since this process loaded the package's logger."""
    return f"+{time.perf_counter() - _START:.1f}s"


def command_data(text: str) -> str:
    """``text`` safe as the data of a workflow command (one line, ``%`` kept literal)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


# The action's children print their groups as these marker lines: their output reaches the
# job log inside a stop-commands guard, where the runner would ignore a ``::group::``; the
# parent turns each marker into a group of its own between two guards
# (``workflow_commands.ChildOutput``). A script can print a marker too: it gets a group,
# never a command (the parent escapes the title).
GROUP_MARKER = "[observer-ci:group] "
ENDGROUP_MARKER = "[observer-ci:endgroup]"
GROUPS_VARIABLE = "OBSERVER_CI_LOG_GROUPS"  # "markers": set by the action for its children
_GROUP_MODE = (
    "markers"
    if os.environ.get(GROUPS_VARIABLE) == "markers"
    else "commands"
    if os.environ.get("GITHUB_ACTIONS") == "true"
    else ""
)


def one_line(text: str) -> str:
    """``text`` on one line: CR and LF become spaces."""
    return text.replace("\r", " ").replace("\n", " ")


@contextmanager
def log_group(title: str) -> Iterator[None]:
    """A collapsible group in the GitHub job log (``::group::``, or the markers the action's
    parent turns into one); nothing outside GitHub Actions. The title may carry untrusted
    names: it is kept on one line and escaped as command data."""
    if not _GROUP_MODE:
        yield
        return
    markers = _GROUP_MODE == "markers"
    start = GROUP_MARKER + one_line(title) if markers else f"::group::{command_data(title)}"
    print(start, file=_our_stream(), flush=True)
    try:
        yield
    finally:
        print(ENDGROUP_MARKER if markers else "::endgroup::", file=_our_stream(), flush=True)


def log_failure(
    headline: str, raw: str | None, title: str, say: Callable[[str], None] | None = None
) -> None:
    """A failure in the log: ``headline`` (the cause, in our words) on one line, then, in the
    GitHub job log, the raw error text in a collapsed group ``title``, each line a log line of
    ours (so none of it can start a workflow command). Elsewhere the raw text is in the report
    and results.json only. ``say`` prints the headline (default: :func:`progress`)."""
    (say or progress)(headline)
    raw = (raw or "").strip()
    if not _GROUP_MODE or not raw or raw == headline:
        return
    with log_group(title):
        for line in raw.splitlines():
            logger.info("| %s", line)


@contextmanager
def quiet_third_party(verbose: bool = False) -> Iterator[None]:
    """Silences library deprecation notices and warning and error logs unless ``verbose``."""
    if verbose:
        yield
        return
    saved = {name: logging.getLogger(name).level for name in THIRD_PARTY_LOGGERS}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", module=THIRD_PARTY_MODULES)
        for name in THIRD_PARTY_LOGGERS:  # their errors too: ours say what failed
            logging.getLogger(name).setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            for name, level in saved.items():
                logging.getLogger(name).setLevel(level)


class _Discard:
    """A text stream that drops what is written to it."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


@contextmanager
def quiet_pipeline(verbose: bool = False) -> Iterator[None]:
    """While observer-ci exports, replays and probes a model: every warning and whatever
    libraries print on ``sys.stderr`` (torch.export prints the partial graph of a failed
    export, once per strategy) is dropped unless ``verbose``. Our own lines keep the real
    stream (:func:`configure` binds it first)."""
    if verbose:
        yield
        return
    configure()
    with warnings.catch_warnings(), redirect_stderr(_Discard()):
        warnings.simplefilter("ignore")
        yield


def _our_stream():
    """The stream our log lines go to (kept while :func:`quiet_pipeline` redirects stderr)."""
    for handler in logger.handlers:
        if getattr(handler, "_observer_ci", False):
            return handler.stream  # type: ignore[attr-defined]
    return sys.stderr
