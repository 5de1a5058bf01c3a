"""False alarms of the history band: ``observer-ci run`` on a shipped example ``--runs``
times into a history directory, then ``--reruns`` more identical runs compared with
``--baseline history:DIR``; prints the latency alerts raised (target 0) and each model's band
width, then one run of a 2x slower variant of the model (an extra matmul, no sleep), which
must be flagged. Run:
    python benchmarks/bench_history.py [--runs 20] [--reruns 20] [--example mlp_classifier]
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

SLOWER = """
import runpy, torch
_linear = torch.nn.functional.linear
def slower(x, w, b=None):  # every linear layer does its matmul twice: about 2x the work
    y = _linear(x, w, b)
    return y + 0 * _linear(x, w, b)
torch.nn.functional.linear = slower
runpy.run_path({script!r}, run_name="__main__")
"""


def observe(script: Path, out: Path, *extra: str) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "observer_ci", "run", str(script), "--out", str(out)]
    subprocess.run([*command, "--no-probe", *extra], env=env, capture_output=True, check=False)
    return json.loads((out / "results.json").read_text())["models"]


def alerts(out: Path) -> int:
    report = (out / "report.md").read_text()
    return sum("| latency_ratio |" in line for line in report.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--reruns", type=int, default=20)
    parser.add_argument("--example", default="mlp_classifier")
    args = parser.parse_args()
    script = REPO / "examples" / f"{args.example}.py"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for k in range(args.runs):
            observe(script, root / "history" / f"run-{k:03d}")
        from observer_ci.report.history import read_history

        history = read_history(root / "history", last=args.runs)
        for name, band in history.bands.items():
            width = (band.high - band.low) / band.median
            print(f"band {name}: median {band.median * 1e3:.3f} ms, width {width:.1%}")
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
