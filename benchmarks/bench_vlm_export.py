"""Export time of a vision-language model's graphs together vs the same graphs by hand.

Target (issue 18): observer-ci exporting every graph of an image-text ``generate()`` (the
call families planned, one export per family with its sample ranking, save, ONNX
description and named axes) within 1.5x of the sum of exporting the same graphs by hand
with ``torch.onnx.export(dynamo=True)``, each from the family's first export candidate
with its inferred dynamic shapes (and the same ``custom_translation_table``: by hand the
export fails on ``aten._is_all_true`` without it). Measured side by side in one process,
alternating, after one warm-up of each; the best of ``--rounds`` is kept for each.
Prints figures and the ratio; asserts nothing.
Run: python benchmarks/bench_vlm_export.py [--rounds 1] [--script examples/families/X.py]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import runpy
import tempfile
import time
from pathlib import Path

FAMILIES = Path(__file__).resolve().parents[1] / "examples" / "families"
DEFAULT_SCRIPT = FAMILIES / "paligemma_image_text.py"


def _observed(script: Path):
    """The first model ``script`` observes, and its call families with their observers."""
    from observer_ci.observing import registry
    from observer_ci.observing.families import plan_families
    from observer_ci.pipeline.family_server import _flags_for

    registry.take_registered()
    with contextlib.redirect_stdout(io.StringIO()):
        runpy.run_path(str(script), run_name="__main__")
    entry = registry.take_registered()[0]
    obs, flags = entry.observer, entry.set_batch_dimension_for
    families = []
    for family in plan_families(obs, flags):
        sub = obs.subset(
            family.indices,
            inherit_dynamic=family.inherit_dynamic,
            without_missing=family.without_missing,
        )
        families.append((family, sub, _flags_for(sub, flags)))
    return entry, families


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--script", type=Path, default=DEFAULT_SCRIPT)
    options = parser.parse_args()

    import torch

    from observer_ci.pipeline.family_server import export_model
    from observer_ci.pipeline.onnx_translations import translation_table

    entry, families = _observed(options.script)

    def by_hand(out: Path) -> None:
        for family, sub, flags in families:
            sample = sub.export_candidates()[0]
            with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
                program = torch.onnx.export(
                    entry.model,
                    (),
                    kwargs=sub.infer_arguments(sample),
                    dynamic_shapes=sub.infer_dynamic_shapes(flags),
                    dynamo=True,
                    custom_translation_table=translation_table(),
                )
            program.save(str(out / f"{family.name}.onnx"))

    def together(out: Path) -> None:
        for family, sub, flags in families:
            result = export_model(
                entry,
                out / f"{family.name}.onnx",
                observer=sub,
                set_batch_dimension_for=flags,
                call_numbers=family.indices,
            )
            assert result.ok, (family.name, result.error)

    names = [f.name for f, _, _ in families]
    print(f"{entry.name}: {len(families)} graphs {names}")
    best = {"by hand": float("inf"), "observer-ci": float("inf")}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(options.rounds + 1):  # round 0 warms both up
            for label, run in (("by hand", by_hand), ("observer-ci", together)):
                out = Path(tmp) / f"{label.replace(' ', '_')}_{round_}"
                out.mkdir()
                begin = time.perf_counter()
                run(out)
                seconds = time.perf_counter() - begin
                if round_:
                    best[label] = min(best[label], seconds)
                print(f"  round {round_} {label}: {seconds:.1f} s")
    ratio = best["observer-ci"] / best["by hand"]
    print(
        f"{entry.name}: by hand {best['by hand']:.1f} s, observer-ci {best['observer-ci']:.1f} s, "
        f"ratio {ratio:.2f}x (target <= 1.5x)"
    )


if __name__ == "__main__":
    main()
