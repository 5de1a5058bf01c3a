"""The child's job log: phase lines with elapsed time, one group per script and per model,
and third-party warnings kept quiet unless ``verbose``.

Lines go to stderr (the parent captures the child's stdout). Group titles carry
script and model names, which are untrusted: they are escaped as workflow
command data, so a name cannot end the line and start a command of its own.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Loggers of libraries that warn on every export (e.g. "torchvision is not installed").
THIRD_PARTY_LOGGERS = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "transformers")
THIRD_PARTY_MODULES = r"(torch|onnx|onnxscript|onnxruntime|onnx_ir|transformers|copyreg)(\.|$)"

_START = time.perf_counter()


def command_data(text: str) -> str:
    """``text`` safe as the data of a workflow command (one line, ``%`` kept literal)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def progress_line(message: str) -> None:
    """``[observer-ci +12.3s] message`` on stderr: the time since the process started."""
    elapsed = time.perf_counter() - _START
    print(f"[observer-ci +{elapsed:.1f}s] {message}", file=sys.stderr, flush=True)


@contextmanager
def log_group(title: str, emit: Callable[[str], None] | None = None) -> Iterator[None]:
    """A collapsible ``::group::`` in the GitHub job log (plain lines elsewhere)."""
    if not in_github_actions():
        yield
        return
    write = emit or (lambda line: print(line, file=sys.stderr, flush=True))
    write(f"::group::{command_data(title)}")
    try:
        yield
    finally:
        write("::endgroup::")


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
