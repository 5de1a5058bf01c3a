"""Peak memory of one phase of the child (an export, a session's creation, a run).

``resource.getrusage(...).ru_maxrss`` is the process's peak since it started: monotonic, it
cannot tell what one phase took once an earlier phase (or model) peaked higher. Linux resets
the high-water mark (``VmHWM`` of ``/proc/self/status``) to the current RSS when ``5`` is
written to ``/proc/self/clear_refs`` (Linux 4.0+): reset, run the phase, read ``VmHWM``. That
is the kernel's own peak, every page of every thread counted, nothing sampled, nothing
copied. Where that file cannot be written (a locked-down container), a thread samples
``/proc/self/statm`` every millisecond instead (a spike shorter than that can be missed, and
the sampler must get the GIL); without ``/proc`` (macOS, Windows), no figure.

The reset has one side effect: the kernel's peak of the whole process (``ru_maxrss``, what
``/usr/bin/time -v`` or a parent's ``wait4`` reports) then counts only from the last reset.
:func:`process_peak` folds every peak in before resetting it: ``results.json`` records the
run's true peak as ``peak_rss_bytes``.

A fork per phase would give each phase its own ``ru_maxrss`` too, but the phase's product
(the ONNX file's description, the onnxruntime session) would have to cross back from the
fork, and forking a process whose torch and onnxruntime thread pools are running is unsafe.

Figures are bytes; ``growth`` is the peak over the RSS when the phase began: what the phase
added on top of what was already resident (the gated figure: the absolute peak also counts
the script, torch and the models observed before). The exporter's and onnxruntime's
once-per-process costs (imports, the op registry, torch.export's first run, onnxruntime's
environment: ~150 MB and ~26 MB measured) are paid by :func:`warm_up_exporter` and
:func:`warm_up_onnxruntime` on a 2x2 ``Linear`` before the first measured phase: otherwise
the first model would carry them, and base and head, whose runs start on different models
(``reverse_order``), would differ by them (after the warm-up: ~2 MB, measured).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from observer_ci.core.results import Footprint

METHOD_HWM = "hwm"  # the kernel's high-water mark, reset per phase
METHOD_SAMPLED = "sampled"  # /proc/self/statm read every SAMPLE_S by a thread
SAMPLE_S = 0.001
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_warmed: set[str] = set()
_HWM_RE = re.compile(rb"VmHWM:\s+(\d+) kB")
_PROC = Path("/proc/self")


@dataclass
class PhaseMemory:
    """One phase measured: RSS when it began, the peak during it, and its wall time."""

    start: int | None = None
    peak: int | None = None
    seconds: float = 0.0
    method: str | None = None  # METHOD_HWM, METHOD_SAMPLED, or None (no /proc)

    @property
    def growth(self) -> int | None:
        """The peak over the start (never negative), None when not measured."""
        if self.start is None or self.peak is None:
            return None
        return max(0, self.peak - self.start)


def current_rss() -> int | None:
    """The resident set size now, in bytes (None without ``/proc``)."""
    try:
        return int((_PROC / "statm").read_bytes().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def high_water_mark() -> int | None:
    """``VmHWM``: the peak RSS since the process began or since the last reset, in bytes."""
    try:
        found = _HWM_RE.search((_PROC / "status").read_bytes())
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


_folded_peak = 0  # the largest VmHWM seen before a reset (the process's peak so far)


def process_peak() -> int | None:
    """The process's peak RSS since it started, resets included, in bytes."""
    now = high_water_mark()
    if now is None:
        return _folded_peak or None
    return max(now, _folded_peak)


def reset_high_water_mark() -> bool:
    """Resets ``VmHWM`` to the current RSS (its peak folded into :func:`process_peak`
    first); False where the kernel does not let us."""
    global _folded_peak
    before = high_water_mark()
    try:
        with open(_PROC / "clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    _folded_peak = max(_folded_peak, before or 0)
    return True


@contextlib.contextmanager
def measure(sampled: bool = False) -> Iterator[PhaseMemory]:
    """Measures the block: ``with measure() as m: ...`` then ``m.peak``, ``m.growth``;
    ``sampled``: by the sampling thread even where the high-water mark can be reset (the
    benchmark compares both). Never raises for the measurement itself (a phase without
    figures stays None)."""
    figures = PhaseMemory(start=current_rss())
    if figures.start is None:
        begin = time.perf_counter()
        yield figures
        figures.seconds = time.perf_counter() - begin
        return
    if not sampled and reset_high_water_mark():
        figures.method = METHOD_HWM
        begin = time.perf_counter()
        try:
            yield figures
        finally:
            figures.seconds = time.perf_counter() - begin
            peak = high_water_mark()
            figures.peak = None if peak is None else max(peak, figures.start)
        return
    figures.method = METHOD_SAMPLED
    sampler = _Sampler(figures.start)
    sampler.start()
    begin = time.perf_counter()
    try:
        yield figures
    finally:
        figures.seconds = time.perf_counter() - begin
        figures.peak = sampler.stop()


class _Sampler(threading.Thread):
    """Reads the RSS every :data:`SAMPLE_S` until stopped; keeps the largest."""

    def __init__(self, start: int) -> None:
        super().__init__(name="observer-ci-rss", daemon=True)
        self.peak = start
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            rss = current_rss()
            if rss is not None and rss > self.peak:
                self.peak = rss

    def stop(self) -> int:
        self.done.set()
        self.join()
        rss = current_rss()
        return max(self.peak, rss or 0)


def warm_up_exporter(opset: int) -> None:
    """The exporter's once-per-process costs paid on a tiny model, outside any measured
    phase (once; a failure is ignored: the real export reports its own)."""
    if "export" in _warmed:
        return
    _warmed.add("export")
    try:
        import tempfile

        import torch

        from observer_ci.pipeline.onnx_exporter import onnx_export

        with tempfile.TemporaryDirectory() as folder, torch.no_grad():
            shapes = ({0: torch.export.Dim("batch")},)
            program = onnx_export(
                torch.nn.Linear(2, 2).eval(), (torch.zeros(2, 2),), None, shapes, opset
            )
            path = os.path.join(folder, "warm_up.onnx")
            program.save(path)
            warm_up_onnxruntime(path)
    except Exception:
        pass


# y = Relu(x), x and y float [2, 2], opset 18, IR 8: a serialized ModelProto, so the warm-up
# needs no onnx import (a run whose exports all come from the cache never imports it)
_TINY_GRAPH = (
    b'\x08\x08:>\n\x0c\n\x01x\x12\x01y"\x04Relu\x12\x04warmZ\x13\n\x01x\x12\x0e\n\x0c'
    b"\x08\x01\x12\x08\n\x02\x08\x02\n\x02\x08\x02b\x13\n\x01y\x12\x0e\n\x0c\x08\x01\x12"
    b"\x08\n\x02\x08\x02\n\x02\x08\x02B\x04\n\x00\x10\x12"
)


def warm_up_onnxruntime(path: str | None = None) -> None:
    """onnxruntime's once-per-process costs (import, environment, first session and run)
    paid on a tiny graph (``path``, else :data:`_TINY_GRAPH`), outside any measured phase
    (once; a failure is ignored: the real session reports its own)."""
    if "onnxruntime" in _warmed:
        return
    _warmed.add("onnxruntime")
    try:
        import numpy as np
        import onnxruntime as ort

        session = ort.InferenceSession(path or _TINY_GRAPH, providers=["CPUExecutionProvider"])
        session.run(None, {session.get_inputs()[0].name: np.zeros((2, 2), np.float32)})
    except Exception:
        pass


def graph_footprint(export: PhaseMemory | None, session: PhaseMemory | None) -> Footprint:
    """A graph's :class:`Footprint` from its measured phases (``export`` None: restored
    from the cache, not exported here)."""
    measured = export or PhaseMemory()
    session = session or PhaseMemory()
    return Footprint(
        export_bytes=measured.growth,
        export_peak=measured.peak,
        session_bytes=session.growth,
        session_peak=session.peak,
        session_seconds=session.seconds or None,
        method=session.method or measured.method,
    )
