"""The cost of ``variants: fp16,int8,optimized``, measured side by side.

Runs ``observer-ci run EXAMPLES --cache-dir C`` without variants (A) and with
``--variants fp16,int8,optimized`` (B) in turn (A B B A ...), the export cache warm so both
restore the same exports (variants are built from the cached export: a hit does not export
again). Per pair: the extra wall-clock and CPU seconds of B, divided by the number of variants,
against the budget the issue sets: the float32 replay time (observer-ci's ``replay`` and
``probe`` phases of A) plus the conversion (each variant's ``convert_s`` in B). Prints the
median over pairs of the extra time per variant, the budget, their ratio (target <= 1), and
B's per-variant breakdown (build, replay, latency vs the float32 CPU graph). Asserts nothing.
Run:
    python benchmarks/bench_variants.py [--rounds 3] [--pin 0] [EXAMPLE.py ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_EXAMPLES = ["mlp_classifier.py", "small_cnn.py", "text_encoder.py", "lstm_tagger.py"]
VARIANTS = ("fp16", "int8", "optimized")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(scripts: list[str], out: Path, cache: Path, extra: list[str], pin: str | None):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "observer_ci", "run", *scripts, "--out", str(out)]
    cmd += ["--cache-dir", str(cache), "--no-gate", *extra]
    if pin is not None:
        cmd = ["taskset", "-c", pin, *cmd]
    cpu, begin = children_cpu(), time.perf_counter()
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)
    wall, cpu = time.perf_counter() - begin, children_cpu() - cpu
    return wall, cpu, json.loads((out / "results.json").read_text())


def phases(results: dict, *names: str) -> float:
    return sum(m.get("phase_seconds", {}).get(n, 0.0) for m in results["models"] for n in names)


def variant_rows(results: dict) -> list[tuple[str, dict]]:
    return [
        (m["name"], v)
        for m in results["models"]
        for g in m.get("graphs", [])
        for v in g.get("variants", [])
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="*", help="scripts (default: four shipped examples)")
    parser.add_argument("--rounds", type=int, default=3, help="A/B pairs")
    parser.add_argument("--pin", help="taskset CPU list for every run (e.g. 0)")
    args = parser.parse_args()
    scripts = args.examples or [str(REPO / "examples" / e) for e in DEFAULT_EXAMPLES]
    work = Path(tempfile.mkdtemp(prefix="bench-variants-"))
    cache = work / "cache"
    flags = ["--variants", ",".join(VARIANTS)]
    print(f"examples: {', '.join(Path(s).name for s in scripts)}; load {os.getloadavg()[0]:.2f}")
    run(scripts, work / "warm", cache, [], args.pin)  # fills the export cache
    pairs, last_b = [], None
    for k in range(args.rounds):
        order = [(False, True), (True, False)][k % 2]
        got = {}
        for with_variants in order:
            out = work / ("b" if with_variants else "a")
            got[with_variants] = run(scripts, out, cache, flags if with_variants else [], args.pin)
        (a_wall, a_cpu, a), (b_wall, b_cpu, b) = got[False], got[True]
        last_b = b
        rows = [v for _, v in variant_rows(b) if v["variant"] in VARIANTS]
        convert = sum(v.get("convert_s") or 0.0 for v in rows) / len(VARIANTS)
        replay = phases(a, "replay", "probe")
        extra_wall = (b_wall - a_wall) / len(VARIANTS)
        extra_cpu = (b_cpu - a_cpu) / len(VARIANTS)
        in_process = phases(b, "variants") / len(VARIANTS)
        budget = replay + convert
        pairs.append((extra_wall, extra_cpu, in_process, replay, convert, budget))
        print(
            f"round {k + 1}: without {a_wall:.2f} s wall / {a_cpu:.2f} s cpu, with "
            f"{b_wall:.2f} s / {b_cpu:.2f} s; per variant +{extra_wall:.3f} s wall, "
            f"+{extra_cpu:.3f} s cpu (variants phase {in_process:.3f} s); budget: float32 "
            f"replay+probe {replay:.3f} s + conversion {convert:.3f} s = {budget:.3f} s"
        )
    med = [statistics.median(p[i] for p in pairs) for i in range(6)]
    print(
        f"\nmedian over {len(pairs)} pairs, per variant: extra wall {med[0]:.3f} s, extra cpu "
        f"{med[1]:.3f} s, variants phase {med[2]:.3f} s; budget {med[5]:.3f} s (float32 replay "
        f"+ probe {med[3]:.3f} s + conversion {med[4]:.3f} s)"
    )
    print(
        f"ratio extra/budget: wall {med[0] / med[5]:.2f}x, cpu {med[1] / med[5]:.2f}x, "
        f"variants phase {med[2] / med[5]:.2f}x (target <= 1)"
    )
    print("\nper variant (last round): model, variant, state, built in, replay, vs float32 CPU")
    for name, v in variant_rows(last_b or {"models": []}):
        if v["provider"] != "cpu":
            continue
        convert = f"{v['convert_s']:.3f} s" if v.get("convert_s") else "-"
        replay_s = f"{v['replay_s']:.3f} s" if v.get("replay_s") else "-"
        ratio = f"x{v['latency_ratio']:.2f}" if v.get("latency_ratio") else "-"
        print(f"  {name:16} {v['variant']:10} {v['state']:19} {convert:>9} {replay_s:>9} {ratio}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
