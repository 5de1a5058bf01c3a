"""End-to-end phase times for the shipped examples (script, infer, export, replay, probe).

Prints figures; it asserts nothing. Run: python benchmarks/bench_pipeline.py [--no-llama]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def main() -> None:
    begin = time.perf_counter()
    import torch  # noqa: F401

    from observer_ci.pipeline.config import RunConfig
    from observer_ci.pipeline.scripts import run_scripts

    import_s = time.perf_counter() - begin
    scripts = sorted(EXAMPLES.glob("*.py"))
    if "--no-llama" in sys.argv:
        scripts = [s for s in scripts if "llama" not in s.name]
    with tempfile.TemporaryDirectory() as out:
        begin = time.perf_counter()
        results = run_scripts(scripts, out, config=RunConfig(), progress=lambda m: None)
        total = time.perf_counter() - begin
    print(f"import torch + observer_ci: {import_s:.2f} s")
    header = f"{'model':24s} {'status':12s} " + " ".join(
        f"{p:>8s}" for p in ("script", "infer", "export", "replay", "probe")
    )
    print(header + "   torch med   ORT med")
    for m in results.models:
        phases = " ".join(
            f"{m.phase_seconds.get(p, 0.0):8.3f}"
            for p in ("script", "infer", "export", "replay", "probe")
        )
        torch_ms = (m.median_torch_latency_s or 0) * 1e3
        ort_ms = (m.median_ort_latency_s or 0) * 1e3
        print(f"{m.name:24s} {m.status:12s} {phases}   {torch_ms:7.3f} ms {ort_ms:7.3f} ms")
    print(f"total for {len(scripts)} scripts: {total:.2f} s (seconds per phase above)")


if __name__ == "__main__":
    main()
