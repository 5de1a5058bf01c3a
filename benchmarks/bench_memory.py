"""The child's memory figures (``pipeline/memory.py``) beside ``/usr/bin/time -v``'s.

For each phase the child measures (export, session creation, first run), fresh processes do
only that phase on the same model (an MLP, ``--width`` wide, 4 layers, random weights):

- ``time``: nothing measured inside; the phase's peak is the process's ``ru_maxrss`` as its
  parent's ``os.wait4`` returns it (what ``/usr/bin/time -v`` prints as "Maximum resident set
  size", and ``getrusage(RUSAGE_CHILDREN)`` of a parent with that one child), its growth that
  minus the RSS the child printed just before the phase;
- ``hwm``: the meter as the pipeline uses it (the kernel's high-water mark reset before the
  phase), in the same cold process: its peak should be ``time``'s;
- ``sampled``: the fallback meter (a thread reading ``/proc/self/statm`` every millisecond);
- ``pipeline``: the meter after the warm-up the pipeline runs first (the exporter's and
  onnxruntime's once-per-process costs paid on a 2x2 Linear): the figure ``memory_growth``
  compares. Its spread over the runs is the noise the rule's threshold must clear.

Each of the ``--runs`` rounds runs every phase and mode once, interleaved. Prints per phase
and mode the median and the min-max of the peak and of the growth, the meters' peaks over
``time``'s, and the spread ((max - min) / median) of the pipeline's growth. Asserts nothing.
Run:
    python benchmarks/bench_memory.py [--runs 10] [--width 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
PHASES = ("export", "session", "run")
MODES = ("time", "hwm", "sampled", "pipeline")
MIB = 1 << 20


def child(phase: str, mode: str, onnx_path: str, width: int) -> None:
    """One phase in this fresh process; prints the RSS before it and the meter's figures."""
    import torch

    from observer_ci.core.constants import DEFAULT_OPSET
    from observer_ci.pipeline import memory

    torch.manual_seed(0)
    layers = [torch.nn.Linear(width, width) for _ in range(4)]
    model = torch.nn.Sequential(*layers).eval()
    x = torch.randn(8, width)
    if mode == "pipeline":
        memory.warm_up_exporter(DEFAULT_OPSET)
        memory.warm_up_onnxruntime()
    if phase == "export":
        from observer_ci.pipeline.onnx_exporter import onnx_export

        def action() -> None:
            with torch.no_grad():
                shapes = ({0: torch.export.Dim("batch")},)
                onnx_export(model, (x,), None, shapes, DEFAULT_OPSET).save(onnx_path)

    else:
        from observer_ci.pipeline.ort_session import make_session

        session = make_session(onnx_path) if phase == "run" else None

        def action() -> None:
            if session is None:
                make_session(onnx_path)
            else:
                session.run(None, {session.get_inputs()[0].name: x.numpy()})

    before = memory.current_rss()
    if mode == "time":
        action()
        print(json.dumps({"before": before}))
        return
    with memory.measure(sampled=mode == "sampled") as figures:
        action()
    print(json.dumps({"before": before, "peak": figures.peak, "growth": figures.growth}))


def spawn(phase: str, mode: str, onnx_path: str, width: int) -> dict:
    """Runs one child; its figures plus ``maxrss``, the kernel's peak of the whole process."""
    command = [sys.executable, __file__, "--child", phase, mode, onnx_path, "--width", str(width)]
    env = {**ENV, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    output = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{phase}/{mode} failed: {output[-500:]}")
    figures = json.loads(output.strip().splitlines()[-1])
    figures["maxrss"] = usage.ru_maxrss * 1024  # KiB on Linux
    if mode == "time":
        figures["peak"] = figures["maxrss"]
        figures["growth"] = figures["maxrss"] - figures["before"]
    return figures


def summary(values: list[float]) -> str:
    median = statistics.median(values)
    return f"{median / MIB:8.1f} [{min(values) / MIB:.1f}-{max(values) / MIB:.1f}]"


def spread(values: list[float]) -> str:
    median = statistics.median(values)
    return f"{(max(values) - min(values)) / median:.1%}" if median else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--modes", default=",".join(MODES), help="a subset of " + ",".join(MODES))
    parser.add_argument("--child", nargs=3, metavar=("PHASE", "MODE", "ONNX"))
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.width)
        return
    modes = [m for m in MODES if m in args.modes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        onnx_path = str(Path(folder) / "mlp.onnx")
        spawn("export", "time", onnx_path, args.width)  # the file the other phases load
        rows: dict[tuple[str, str], list[dict]] = {}
        for k in range(args.runs):
            print(f"round {k + 1}/{args.runs}", file=sys.stderr, flush=True)
            for phase in PHASES:
                for mode in modes:
                    path = (
                        str(Path(folder) / f"{phase}-{mode}.onnx")
                        if phase == "export"
                        else onnx_path
                    )
                    rows.setdefault((phase, mode), []).append(spawn(phase, mode, path, args.width))
    weights = 4 * args.width * (args.width + 1) * 4
    print(f"MLP 4 x {args.width} ({weights / MIB:.1f} MiB of weights), {args.runs} runs")
    print("MiB, median [min-max]")
    print(f"{'phase':8} {'mode':9} {'peak RSS':>22} {'added by the phase':>22}  peak/time  spread")
    for phase in PHASES:
        time_peak = statistics.median(r["peak"] for r in rows.get((phase, "time"), [{"peak": 0}]))
        for mode in modes:
            found = rows[(phase, mode)]
            peaks = [r["peak"] for r in found]
            growths = [r["growth"] for r in found]
            ratio = f"{statistics.median(peaks) / time_peak:9.3f}" if time_peak else "        -"
            print(
                f"{phase:8} {mode:9} {summary(peaks):>22} {summary(growths):>22}  "
                f"{ratio}  {spread(growths)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
