"""The CUDA provider, where this onnxruntime has it (onnxruntime-gpu on a GPU runner):
every observed call and the probe replayed on CUDA, torch timed on the same device.
Without it the test says why it is skipped (``-rs`` prints the reason)."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from observer_ci.core.results import STATUS_OK
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.scripts import run_scripts

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp_classifier.py"
INSTALLED = ort.get_available_providers()


def require_cuda() -> None:
    if "CUDAExecutionProvider" not in INSTALLED:
        reason = (
            f"no CUDA here: onnxruntime {ort.__version__} offers {', '.join(INSTALLED)}; "
            "install onnxruntime-gpu on a GPU runner to run the CUDA provider checks"
        )
        print(reason)
        pytest.skip(reason)


def test_every_call_replays_on_cuda_with_torch_on_the_same_device(tmp_path):
    require_cuda()
    import torch

    config = RunConfig(warmup=1, repeat=3, variants=("fp16",), providers=("cpu", "cuda"))
    (model,) = run_scripts([MLP], tmp_path, config=config, progress=print).models
    assert model.status == STATUS_OK
    rows = {(v.variant, v.provider): v for v in model.graphs[0].variants}
    for key in (("float32", "cuda"), ("fp16", "cuda"), ("fp16", "cpu")):
        row = rows[key]
        assert row.state == "ok" and row.calls_within == row.calls == 3, row
        assert row.latency_s > 0 and row.latency_ratio > 0 and row.probe_state == "success"
    assert rows[("float32", "cuda")].abs <= 1e-3
    if torch.cuda.is_available():  # a CUDA build of torch times itself on the GPU too
        assert rows[("float32", "cuda")].torch_latency_s > 0
    else:
        print("torch has no CUDA here: only onnxruntime ran on the GPU")
        assert rows[("float32", "cuda")].torch_latency_s is None
