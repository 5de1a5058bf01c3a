"""CUDA vs CPU latency per example, for a GPU machine (onnxruntime-gpu, torch with CUDA).

Runs ``observer-ci run EXAMPLE --providers cpu,cuda --variants fp16`` once per example and
prints, per model and graph, the median latency of a call on each provider and variant, its
ratio to the float32 graph on the CPU provider (what the report's "vs float32 CPU" column
shows), torch's own latency on the GPU, and the worst abs error against torch. Without a
CUDA provider it prints which providers this onnxruntime has and stops (exit 0). Prints
figures, asserts nothing. ORT latencies include copying the feeds to the GPU and the outputs
back (onnxruntime is fed numpy arrays), as a user calling ``session.run`` sees. Run:
    python benchmarks/bench_providers.py [--variants fp16,int8,optimized] [EXAMPLE.py ...]
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
DEFAULT = [
    "mlp_classifier.py",
    "small_cnn.py",
    "text_encoder.py",
    "lstm_tagger.py",
    "dict_batch.py",
]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _abs(row: dict) -> str:
    return "-" if row.get("abs") is None else f"{row['abs']:.2g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="*")
    parser.add_argument("--variants", default="fp16")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    import onnxruntime as ort

    installed = ort.get_available_providers()
    print(f"onnxruntime {ort.__version__}: {', '.join(installed)}")
    if "CUDAExecutionProvider" not in installed:
        print("no CUDAExecutionProvider: install onnxruntime-gpu on a machine with a GPU")
        return 0
    scripts = args.examples or [str(REPO / "examples" / e) for e in DEFAULT]
    print(
        f"{'model':28} {'variant':10} {'provider':8} {'latency':>11} {'vs f32 CPU':>10} "
        f"{'torch GPU':>11} {'max abs':>9}"
    )
    for script in scripts:
        out = Path(tempfile.mkdtemp(prefix="bench-providers-"))
        cmd = [
            sys.executable,
            "-m",
            "observer_ci",
            "run",
            script,
            "--out",
            str(out),
            "--providers",
            "cpu,cuda",
            "--variants",
            args.variants,
            "--no-gate",
            "--repeat",
            str(args.repeat),
        ]
        subprocess.run(cmd, env=ENV, check=False, capture_output=True)
        try:
            results = json.loads((out / "results.json").read_text())
        except OSError:
            print(f"{Path(script).name}: no results")
            continue
        for model in results["models"]:
            for graph in model.get("graphs", []):
                name = model["name"] + ("" if len(model["graphs"]) == 1 else f"[{graph['name']}]")
                for v in graph.get("variants", []):
                    lat = v.get("latency_s")
                    ratio = v.get("latency_ratio")
                    torch_s = v.get("torch_latency_s")
                    print(
                        f"{name[:28]:28} {v['variant'][:10]:10} {v['provider']:8} "
                        f"{(f'{lat * 1e3:.3f} ms' if lat else v['state'])[:11]:>11} "
                        f"{(f'x{ratio:.2f}' if ratio else '-'):>10} "
                        f"{(f'{torch_s * 1e3:.3f} ms' if torch_s else '-'):>11} "
                        f"{_abs(v):>9}"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
