"""One line per model of every example, shipped and families: the issue-12 closing table.

family | graphs | export s | max abs | probe | status (export s: wall seconds of the export
phase, every graph of the model). Prints; asserts nothing.
Run: python benchmarks/bench_families.py [script.py ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def main() -> None:
    from observer_ci.core.results import max_or_none
    from observer_ci.pipeline.config import RunConfig
    from observer_ci.pipeline.scripts import run_scripts

    scripts = [Path(a) for a in sys.argv[1:]] or sorted(
        [*EXAMPLES.glob("*.py"), *(EXAMPLES / "families").glob("*.py")]
    )
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for script in scripts:
            results = run_scripts(
                [script], out, config=RunConfig(warmup=1, repeat=3), progress=lambda m: None
            )
            rows.extend(results.models)
    print("| family | graphs | export s | max abs | probe | status |")
    print("|---|---|---|---|---|---|")
    for m in rows:
        graphs = ", ".join(g.name for g in m.graphs) or "-"
        export_s = m.phase_seconds.get("export")
        probes = [g.probe for g in m.graphs if g.probe is not None]
        probe = (
            "ok"
            if probes and all(p.ran and p.success for p in probes)
            else "; ".join(p.reason or p.error or "failed" for p in probes) or "-"
        )
        worst = max_or_none(o.abs for o in m.observations)
        max_abs = f"{worst:.1e}" if worst is not None else "-"
        status = m.status if m.status == "ok" else f"{m.status}: {(m.error or '')[-120:]!r}"
        export = f"{export_s:.1f}" if export_s is not None else "-"
        print(
            f"| {m.name} | {len(m.graphs)}: {graphs} | {export} | {max_abs} | {probe} | {status} |"
        )


if __name__ == "__main__":
    main()
