"""Should the onnxscript optimiser run on the exported graph, and differently on large ones?

observer-ci exports through the exporter's own entry point (``pipeline/onnx_exporter.py``),
which runs ``ONNXProgram.optimize()`` by default, as ``torch.onnx.export`` does. Here the
export runs with ``optimize=False`` and the optimiser is timed on its own.
For a small-width Llama at two depths this prints, without and with the optimiser: export
seconds, optimise seconds, ONNX node count, onnxruntime session-creation seconds and the
median of 5 runs of the prefill, and the max abs difference between the two graphs'
outputs. Random weights, no hub download; one process per depth (peak memory apart). Run:
    python benchmarks/bench_optimiser.py [--layers 6,20] [--hidden 64]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure(layers: int, hidden: int, tmp: Path) -> dict[str, float]:
    """One depth, in this process: export once, save, optimise, save again, replay both."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers
    from torch.onnx._internal.exporter import _core

    from observer_ci.observing.pytrees import register_transformers_pytrees
    from observer_ci.pipeline.onnx_exporter import onnx_registry

    register_transformers_pytrees()  # the returned DynamicCache as a pytree
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=1000,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 1000, (2, 8))
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    dyn = torch.export.Dim.DYNAMIC
    shapes = {"input_ids": {0: dyn, 1: dyn}, "attention_mask": {0: dyn, 1: dyn}}
    figures: dict[str, float] = {"layers": layers}
    begin = time.perf_counter()
    registry = onnx_registry(18)  # built outside the timed export, as observer-ci does
    with torch.no_grad():
        program = _core.export(
            model, (), kwargs, registry=registry, dynamic_shapes=shapes, optimize=False
        )
    figures["export_s"] = time.perf_counter() - begin
    figures["nodes_plain"] = len(program.model.graph)
    program.save(str(tmp / "plain.onnx"))
    begin = time.perf_counter()
    program.optimize()
    figures["optimise_s"] = time.perf_counter() - begin
    figures["nodes_optimised"] = len(program.model.graph)
    program.save(str(tmp / "optimised.onnx"))
    feed = {k: v.numpy() for k, v in kwargs.items()}
    outputs = {}
    for name in ("plain", "optimised"):
        begin = time.perf_counter()
        path = str(tmp / f"{name}.onnx")
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        figures[f"session_{name}_s"] = time.perf_counter() - begin
        session.run(None, feed)
        times = []
        for _ in range(5):
            begin = time.perf_counter()
            outputs[name] = session.run(None, feed)[0]
            times.append(time.perf_counter() - begin)
        figures[f"run_{name}_ms"] = 1000 * statistics.median(times)
    figures["max_abs_plain_vs_optimised"] = float(
        np.abs(outputs["plain"] - outputs["optimised"]).max()
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="6,20")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(measure(args.child, args.hidden, Path(tmp))))
        return
    print(f"load average {os.getloadavg()[0]:.1f}")
    for layers in (int(x) for x in args.layers.split(",")):
        cmd = [sys.executable, __file__, "--child", str(layers), "--hidden", str(args.hidden)]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
        lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
        if not lines:
            print(out.stderr[-2000:])
            continue
        print(json.dumps({**json.loads(lines[-1]), "load": round(os.getloadavg()[0], 1)}))


if __name__ == "__main__":
    main()
