"""False alarms of the history band: ``observer-ci run`` on a shipped example ``--runs``
times into a history directory, then ``--reruns`` more identical runs compared with
``--baseline history:DIR``; prints the latency alerts raised (target 0) and each model's band
width, then one run of a 2x slower variant of the model (an extra matmul, no sleep), which
must be flagged. Run:
    python benchmarks/bench_history.py [--runs 20] [--reruns 20] [--example mlp_classifier]

``--matmul`` measures the same on two tiny test models instead (one ``observer-ci run`` of
two scripts each time, exports shared through ``--cache-dir``): ``mlp_classifier`` (the
shipped example, under the 100 µs latency floor: only the false alarms count there) and
``matmul`` (x @ W, 128x256 by 256x256, over the floor), whose slowed variant does one extra
matmul of the same size: 2x the arithmetic, no sleep. Run:
    python benchmarks/bench_history.py --matmul [--runs 6] [--reruns 6]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from observer_ci.core.results import RunResults  # noqa: E402

SLOWER = """
import runpy, torch
_linear = torch.nn.functional.linear
def slower(x, w, b=None):  # every linear layer does its matmul twice: about 2x the work
    y = _linear(x, w, b)
    return y + 0 * _linear(x, w, b)
torch.nn.functional.linear = slower
runpy.run_path({script!r}, run_name="__main__")
"""


MATMUL = """
import torch
import observer_ci

class MatMul(torch.nn.Module):
    def __init__(self, extra: bool):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(256, 256) / 16)
        self.w2 = torch.nn.Parameter(torch.randn(256, 256) / 16)
        self.extra = extra

    def forward(self, x):
        y = x @ self.w
        return (y @ self.w2 if self.extra else y).relu()  # the extra matmul: 2x the work

torch.manual_seed(0)
model = MatMul(extra=EXTRA).eval()
with torch.no_grad(), observer_ci.observe(model, name="matmul"):
    for batch in (128, 128):
        model(torch.randn(batch, 256))
"""


def observe(script: Path | list[Path], out: Path, *extra: str) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    scripts = [str(s) for s in (script if isinstance(script, list) else [script])]
    command = [sys.executable, "-m", "observer_ci", "run", *scripts, "--out", str(out)]
    subprocess.run([*command, "--no-probe", *extra], env=env, capture_output=True, check=False)
    return json.loads((out / "results.json").read_text())["models"]


def alerts(out: Path, model: str = "") -> int:
    """Latency alerts in the run's report (on ``model`` only, when given)."""
    report = (out / "report.md").read_text()
    rows = [line for line in report.splitlines() if "| latency_ratio |" in line]
    return sum(f"| {model} |" in line for line in rows) if model else len(rows)


def matmul_mode(root: Path, runs: int, reruns: int) -> None:
    """The two tiny test models: history, identical reruns, then the 2x slower matmul."""
    scripts = [REPO / "examples" / "mlp_classifier.py", root / "matmul.py"]
    scripts[1].write_text(MATMUL.replace("EXTRA", "False"))
    cache = ("--cache-dir", str(root / "cache"))
    for k in range(runs):
        observe(scripts, root / "history" / f"run-{k:03d}", *cache)
    spec = ("--baseline", f"history:{root / 'history'}", "--history-runs", str(runs), *cache)
    print_bands(root / "history", runs)
    raised = 0
    for k in range(reruns):
        observe(scripts, root / f"rerun-{k}", *spec)
        raised += alerts(root / f"rerun-{k}")
    print(f"latency alerts on {reruns} identical reruns of 2 models, {runs} earlier: {raised}")
    slower = root / "slower" / "matmul.py"
    slower.parent.mkdir()
    slower.write_text(MATMUL.replace("EXTRA", "True"))
    observe([scripts[0], slower], root / "slower-out", *spec)
    latency = RunResults.read(root / "slower-out" / "results.json").by_name()["matmul"]
    flagged = alerts(root / "slower-out", "matmul") > 0
    print(f"2x slower matmul flagged: {flagged} (ORT median {latency.median_ort_latency_s})")


def print_bands(folder: Path, runs: int) -> None:
    from observer_ci.report.history import read_history

    history = read_history(folder, last=runs)
    for name, band in history.bands.items():
        width = (band.high - band.low) / band.median
        print(
            f"band {name}: median {band.median * 1e6:.1f} µs, 10th-90th "
            f"{band.low * 1e6:.1f}-{band.high * 1e6:.1f} µs, width {width:.1%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--reruns", type=int, default=20)
    parser.add_argument("--example", default="mlp_classifier")
    parser.add_argument("--matmul", action="store_true", help="the two tiny test models")
    args = parser.parse_args()
    script = REPO / "examples" / f"{args.example}.py"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.matmul:
            matmul_mode(root, args.runs, args.reruns)
            return
        for k in range(args.runs):
            observe(script, root / "history" / f"run-{k:03d}")
        print_bands(root / "history", args.runs)
        spec = f"history:{root / 'history'}"
        raised = 0
        for k in range(args.reruns):
            out = root / f"rerun-{k}"
            observe(script, out, "--baseline", spec, "--history-runs", str(args.runs))
            raised += alerts(out)
        print(f"latency alerts on {args.reruns} identical reruns: {raised}")
        slower = root / "slower.py"
        slower.write_text(SLOWER.format(script=str(script)))
        observe(slower, root / "slower", "--baseline", spec, "--history-runs", str(args.runs))
        print(f"2x slower model flagged: {alerts(root / 'slower') > 0}")


if __name__ == "__main__":
    main()
