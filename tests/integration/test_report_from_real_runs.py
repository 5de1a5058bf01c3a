"""Report facts that need a real export: one defect, one regression; notes from the signature."""

from __future__ import annotations

import torch

from observer_ci import observe
from observer_ci.core.results import STATUS_DISCREPANCY, RunResults
from observer_ci.observing.registry import take_registered
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.model_steps import model_notes, process_model
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare, worst_error

FAST = RunConfig(warmup=1, repeat=3)


def quiet(_message: str) -> None:
    pass


class LeftInTraining(torch.nn.Module):
    """Dropout in training mode: every run differs, so the graph matches no stored call."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.lin(x))


def test_one_broken_model_is_one_failing_regression(tmp_path):
    torch.manual_seed(0)
    model = LeftInTraining()  # the defect: no model.eval()
    with torch.no_grad(), observe(model, name="left_in_training"):
        model(torch.randn(2, 8))
        model(torch.randn(3, 8))
    (entry,) = take_registered()
    result = process_model(entry, tmp_path, config=FAST, progress=quiet)
    assert result.status == STATUS_DISCREPANCY, result.error
    # every symptom is there: abs, rel and the probe all exceed the tolerances ...
    assert worst_error(result, "abs") > 1e-3 and worst_error(result, "rel") > 1e-2
    assert result.probe.ran and not result.probe.success
    # ... and they count once
    head = RunResults(models=[result])
    regressions = compare(head, None, Thresholds(), DEFAULT_FAIL_ON)
    # torch does not reproduce itself (issue 19): the rule says so, not the exporter
    assert [(r.rule, r.fails_build) for r in regressions] == [("torch_not_reproducible", True)]
    assert "probe" in regressions[0].message
    report = render_report(head, regressions)
    assert "1 regression fails the build" in report
    assert "training mode" in report  # the note that names the cause


class Decoder(torch.nn.Module):
    """A cache argument that the first call passes as None and later calls as a tensor."""

    def forward(self, x, past=None):
        return x * 2 if past is None else x * 2 + past.sum()


def test_notes_come_from_the_exported_signature_not_one_call():
    model = Decoder()
    with observe(model, name="decoder"):
        model(torch.ones(2, 3), past=None)
        model(torch.ones(2, 3), past=torch.ones(2, 4))
    (entry,) = take_registered()
    assert model_notes(entry) == []  # past is an exported input: not "not exported"

    other = Decoder()
    with observe(other, name="no_cache"):
        other(torch.ones(2, 3), past=None)
        other(torch.ones(3, 3), past=None)
    (entry,) = take_registered()
    (note,) = model_notes(entry)
    assert "not exported as inputs" in note and "past (None)" in note
