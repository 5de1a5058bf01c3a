"""What the report's lazy ``import tabulate`` costs: a fresh interpreter importing it against
one that imports nothing, interleaved so both see the same machine load.

    python benchmarks/import_tabulate.py [--runs 30]

Prints the median wall time of each and their difference (the import's cost), plus the
cumulative time ``-X importtime`` attributes to ``tabulate``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time


def _wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def _importtime_us() -> int:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import tabulate"],
        capture_output=True,
        text=True,
        check=True,
    )
    line = [ln for ln in proc.stderr.splitlines() if ln.rstrip().endswith("| tabulate")][-1]
    return int(re.split(r"\s*\|\s*", line)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    bare, loaded = [], []
    for _ in range(runs):
        bare.append(_wall("pass"))
        loaded.append(_wall("import tabulate"))
    b, t = statistics.median(bare), statistics.median(loaded)
    cumulative = statistics.median(_importtime_us() for _ in range(5))
    print(f"interpreter alone: {b * 1e3:.1f} ms; with import tabulate: {t * 1e3:.1f} ms")
    print(f"import tabulate costs {(t - b) * 1e3:.1f} ms ({runs} interleaved runs, medians)")
    print(f"-X importtime cumulative for tabulate: {cumulative / 1e3:.1f} ms (median of 5)")


if __name__ == "__main__":
    main()
