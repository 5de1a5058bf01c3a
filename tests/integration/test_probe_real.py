"""The unseen-shape probe on a real model whose graph is wrong past the observed sizes.

``SizeBranch`` takes a Python branch on its batch size: every observed call (2, 3, 4) takes
one side, so the exported graph holds only that side and replays all of them exactly. The
probe's unseen size (5) takes the other side in torch: the graph is wrong there, and only
the probe can tell. Real torch.onnx.export and onnxruntime, through the runner.
"""

from __future__ import annotations

import pytest
import torch

from observer_ci import observe
from observer_ci.core.results import STATUS_PROBE_FAILED, ModelResult, RunResults
from observer_ci.observing.registry import take_registered
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.model_steps import process_model
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare

OBSERVED_BATCHES = (2, 3, 4)


class SizeBranch(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > max(OBSERVED_BATCHES):
            return x * 2
        return x + 1


@pytest.fixture(scope="module")
def size_branch(tmp_path_factory) -> ModelResult:
    model = SizeBranch().eval()
    with torch.no_grad(), observe(model, name="size_branch"):
        for batch in OBSERVED_BATCHES:
            model(torch.randn(batch, 3))
    (entry,) = take_registered()
    out = tmp_path_factory.mktemp("probe")
    return process_model(entry, out, config=RunConfig(warmup=0, repeat=1), progress=lambda _: None)


def test_every_observed_call_replays_exactly(size_branch):
    # every observed call replays exactly; only the probe fails (its own status, see below)
    assert size_branch.status == STATUS_PROBE_FAILED, size_branch.error
    assert isinstance(size_branch.export.input_dims["x"][0], str)  # the batch dim is symbolic
    assert [o.abs for o in size_branch.observations] == [0.0, 0.0, 0.0]


def test_the_probe_runs_an_unseen_size_and_catches_the_wrong_graph(size_branch):
    probe = size_branch.probe
    assert probe.ran and probe.ok and not probe.success
    assert probe.shapes["x"][0] not in OBSERVED_BATCHES and probe.shapes["x"][1] == 3
    assert probe.abs > 0.1 and probe.reason


def test_the_probe_failure_fails_the_build_and_survives_results_json(size_branch, tmp_path):
    path = RunResults(models=[size_branch], label="head").write(tmp_path / "results.json")
    head = RunResults.read(path)
    (reg,) = compare(head, None, Thresholds(), DEFAULT_FAIL_ON)
    assert (reg.rule, reg.head_value, reg.fails_build) == (
        "probe_failed",
        "exceeded tolerance",
        True,
    )
