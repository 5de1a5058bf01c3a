"""Export phase of the tiny Llama example vs a bare export from the right sample.

Target (issue 12): the runner's export (candidate ranking, sample choice, save, ONNX
description) within 1.1x of one bare ``torch.onnx.export`` from the prefill call. Both are
measured side by side in one process, alternating, after a warm-up export; the best of
``--rounds`` is kept for each. Prints figures and the ratio; asserts nothing.
Run: python benchmarks/bench_export_sample.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import runpy
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_llama_generate.py"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds

    import torch

    from observer_ci.observing import registry
    from observer_ci.pipeline.export import export_observed

    registry.take_registered()
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    (entry,) = registry.take_registered()
    model, obs, flags = entry.model, entry.observer, entry.set_batch_dimension_for
    prefill = obs.candidate_indices()[0]
    dynamic_shapes = obs.infer_dynamic_shapes(flags)

    def bare(path: Path) -> None:
        with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
            program = torch.onnx.export(
                model,
                (),
                kwargs=obs.infer_arguments(prefill),
                dynamic_shapes=dynamic_shapes,
                dynamo=True,
            )
        program.save(str(path))

    def runner(path: Path) -> None:
        # as the runner calls it: named axes in the file (one more load and save)
        result = export_observed(model, obs, path, set_batch_dimension_for=flags, named_dims=True)
        assert result.ok and result.sample_index == prefill, result

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        bare(out / "warmup.onnx")
        best = {"bare": float("inf"), "runner": float("inf")}
        cpu = dict(best)  # CPU seconds of this process: less sensitive to a shared machine
        for k in range(rounds):
            for name, fn in (("bare", bare), ("runner", runner))[:: 1 if k % 2 == 0 else -1]:
                begin, begin_cpu = time.perf_counter(), time.process_time()
                fn(out / f"{name}_{k}.onnx")
                best[name] = min(best[name], time.perf_counter() - begin)
                cpu[name] = min(cpu[name], time.process_time() - begin_cpu)
    print(f"observed calls: {obs.num_obs()}, export sample chosen: call {prefill} (the prefill)")
    print(f"bare torch.onnx.export from the prefill: {best['bare']:.2f} s (best of {rounds})")
    print(f"runner export phase (export_observed):   {best['runner']:.2f} s (best of {rounds})")
    print(f"load average: {os.getloadavg()[0]:.1f}")
    print(
        f"ratio runner / bare: {best['runner'] / best['bare']:.2f}x wall, "
        f"{cpu['runner'] / cpu['bare']:.2f}x CPU ({cpu['runner']:.2f} / {cpu['bare']:.2f} s) "
        "(target <= 1.10x)"
    )


if __name__ == "__main__":
    main()
