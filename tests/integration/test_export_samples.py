"""The export sample search, with real ``torch.onnx.export``: every observed call is tried
if needed (no cap of three), and the search stops once two samples fail alike."""

import pytest
import torch

from observer_ci import InputObserver
from observer_ci.pipeline.export import export_observed


def size_hint(n):
    """The sample's concrete size behind a symbolic one, without adding a guard."""
    node = getattr(n, "node", None)
    return node.hint if node is not None else n


class PicksItsSample(torch.nn.Module):
    """Fails to export from the batch sizes in ``errors`` (a stand-in for model code that
    traces on some samples only), with that message."""

    def __init__(self, errors: dict[int, str]):
        super().__init__()
        self.errors = errors

    def forward(self, x):
        if torch.compiler.is_exporting():
            message = self.errors.get(size_hint(x.shape[0]))
            if message:
                raise NotImplementedError(message)
        return x * 2


def observed(errors: dict[int, str]) -> tuple[PicksItsSample, InputObserver]:
    model, obs = PicksItsSample(errors), InputObserver()
    with obs(model, store_n_calls=5):
        for batch in (2, 3, 4, 5, 6):
            model(torch.randn(batch, 3))
    assert obs.candidate_indices() == [4, 3, 2, 1, 0]  # the largest first
    return model, obs


def test_a_fourth_candidate_is_tried_when_three_fail_differently(tmp_path):
    model, obs = observed({6: "no six", 5: "no five", 4: "no four"})
    result = export_observed(model, obs, tmp_path / "m.onnx")
    assert result.ok, result.error
    assert result.sample_index == 1  # batch 3, the fourth candidate
    assert [f.split(":")[0] for f in result.failed_samples] == ["call 4", "call 3", "call 2"]
    assert "no six" in result.failed_samples[0] and "no four" in result.failed_samples[2]


@pytest.mark.parametrize(
    ("errors", "tried"),
    [
        ({6: "no batch", 5: "no batch"}, 2),
        ({6: "too wide: 6", 5: "no batch", 4: "too wide: 4"}, 3),  # numbers do not count
    ],
)
def test_the_search_stops_when_two_samples_fail_alike(tmp_path, errors, tried):
    model, obs = observed(errors)
    result = export_observed(model, obs, tmp_path / "m.onnx")
    assert not result.ok and result.sample_index is None
    # the calls of batch 3 and 2 would have worked: the early stop is the trade-off for
    # not paying ~2 s per hopeless sample
    assert len(result.failed_samples) == tried
    assert errors[6] in result.error  # the best candidate's error
