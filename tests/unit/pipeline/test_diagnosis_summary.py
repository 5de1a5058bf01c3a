"""The model's diagnosis from its graphs' (crafted graphs: one, or several call families)."""

from __future__ import annotations

from observer_ci.core.results import Cause, Diagnosis, GraphResult, ProbeResult
from observer_ci.pipeline.diagnosis import summarize
from tests.support.builders import model, observation

MASKED = Cause("masked_positions_only", "only at positions the mask `attention_mask` drops")


def _masked(valid: float) -> Diagnosis:
    return Diagnosis(
        torch_reproducible=True,
        mask_input="attention_mask",
        valid_abs=valid,
        valid_rel=valid,
        masked_abs=0.3,
        masked_rel=30.0,
        seconds=0.1,
        cause=MASKED,
    )


def _failing_model(*graphs: GraphResult):
    calls = [observation(0, abs_=0.3, success=False), observation(1)]
    return model("m", "discrepancy", observations=calls, graphs=list(graphs))


def test_one_graph_its_diagnosis_moves_to_the_model_and_gives_the_cause():
    graph = GraphResult("model", [0, 1], abs=0.3, diagnosis=_masked(1e-7))
    m = _failing_model(graph)
    summarize(m)
    assert m.diagnosis is not None and graph.diagnosis is None  # stored once
    assert m.cause is MASKED


def test_several_graphs_the_worst_counts_and_unmasked_errors_are_kept_positions():
    prefill = GraphResult("decoder_model", [0], abs=0.3, rel=30.0, diagnosis=_masked(1e-7))
    past = GraphResult("decoder_with_past_model", [1], abs=2e-3, rel=1e-3)  # over, no mask
    m = _failing_model(prefill, past)
    summarize(m)
    d = m.diagnosis
    assert d.mask_input == "attention_mask" and d.valid_abs == 2e-3 and d.masked_abs == 0.3
    assert d.seconds == 0.1 and prefill.diagnosis is not None  # graphs keep theirs
    # one graph masked-only, another failing without an explanation: no masked verdict
    other = GraphResult("decoder_with_past_model", [1], abs=2e-3, diagnosis=Diagnosis(True))
    m = _failing_model(GraphResult("decoder_model", [0], diagnosis=_masked(1e-7)), other)
    summarize(m)
    assert m.cause is None and m.diagnosis.cause is None


def test_torch_not_reproducible_wins_and_the_probe_blames_no_size():
    cause = Cause("torch_not_reproducible", "torch does not reproduce ...", "call model.eval()")
    probe = ProbeResult(
        ran=True, ok=True, success=False, shapes={"x": [5, 8]}, cause=Cause("probe_failure", "a")
    )
    bad = Diagnosis(torch_reproducible=False, torch_reason="training mode", cause=cause)
    graphs = [GraphResult("a", [0], probe=probe, diagnosis=bad), GraphResult("b", [1])]
    m = _failing_model(*graphs)
    summarize(m)
    assert m.cause is cause and m.diagnosis.torch_reproducible is False
    assert probe.cause.kind == "torch_not_reproducible"
    assert probe.cause.summary.startswith("at sizes never observed (x 5×8)")
    assert probe.cause.next_step == "call model.eval()"


def test_no_diagnosis_nothing_changes():
    m = model("m")
    summarize(m)
    assert m.diagnosis is None and m.cause is None
