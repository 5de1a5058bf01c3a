"""Warning rules computed from results alone (torch-free): text, rule table, gating."""

from observer_ci.core.results import ExportResult, GraphResult, InputInfo, ModelResult, RunResults
from observer_ci.pipeline.graph_warnings import WARNING_RULES, graph_warnings
from observer_ci.report.rules import (
    DEFAULT_FAIL_ON,
    RULES_BY_NAME,
    Thresholds,
    compare,
    parse_fail_on,
)


def model(**fields):
    base = dict(
        name="m",
        script="s.py",
        status="ok",
        n_observations=2,
        inputs=[InputInfo("x", "torch.float32", [[2, 3], [4, 3]], [0], ["batch_size"])],
        export=ExportResult(ok=True, input_dims={"x": [2, 3]}),
    )
    base.update(fields)
    return ModelResult(**base)


def test_every_warning_is_a_rule_that_never_gates_by_default():
    for rule in WARNING_RULES:
        assert rule in RULES_BY_NAME and rule not in DEFAULT_FAIL_ON
        assert RULES_BY_NAME[rule].unit == "warning"
    assert set(WARNING_RULES) <= parse_fail_on("all")


def test_dynamic_dim_static_in_the_onnx_file():
    (warning,) = graph_warnings(model())
    assert warning.rule == "dim_static_in_onnx"
    assert warning.message == (
        "x dim 0 (batch_size) varied across calls (sizes 2, 4) but is static (2) in the ONNX "
        "file: other sizes will be rejected"
    )


def test_each_graph_is_judged_on_the_calls_it_serves():
    # a prefill (sequence 7) has its own graph; the decode steps (sequence 1) share another,
    # static in the sequence: nothing varied among its calls, nothing to warn about
    ids = InputInfo("ids", "torch.int64", [[2, 7], [2, 1], [2, 1]], [1], ["sequence_length"])
    decode = GraphResult(
        "with_past", [1, 2], export=ExportResult(ok=True, input_dims={"ids": [2, 1]})
    )
    prefill = GraphResult("no_past", [0], export=ExportResult(ok=True, input_dims={"ids": [2, 7]}))
    m = model(n_observations=3, inputs=[ids], export=decode.export, graphs=[decode, prefill])
    assert graph_warnings(m) == []
    # a graph whose own calls varied but whose ONNX dim is static is still flagged
    ids.shapes = [[2, 7], [2, 1], [2, 3]]
    (warning,) = graph_warnings(m)
    assert warning.rule == "dim_static_in_onnx"
    assert "across graph with_past's calls (sizes 1, 3)" in warning.message


def test_stored_warnings_become_regressions_that_fail_only_when_selected():
    m = model()
    m.warnings = graph_warnings(m)
    run = RunResults(models=[m])
    (default,) = compare(run, None, Thresholds(), DEFAULT_FAIL_ON)
    assert default.rule == "dim_static_in_onnx" and not default.fails_build
    (selected,) = compare(run, None, Thresholds(), parse_fail_on("dim_static_in_onnx"))
    assert selected.fails_build
    # the same warning in base: reported, never failing
    (kept,) = compare(run, run, Thresholds(), parse_fail_on("dim_static_in_onnx"))
    assert not kept.fails_build


def test_size_one_dims_are_grouped_by_name():
    inputs = [
        InputInfo(
            "input_ids", "torch.int64", [[1, 5], [1, 7]], [0, 1], ["batch_size", "sequence_length"]
        ),
        InputInfo(
            "attention_mask",
            "torch.int64",
            [[1, 5], [1, 7]],
            [0, 1],
            ["batch_size", "sequence_length"],
        ),
    ]
    m = model(
        inputs=inputs,
        export=ExportResult(
            ok=True,
            input_dims={
                "input_ids": ["batch_size", "sequence_length"],
                "attention_mask": ["batch_size", "sequence_length"],
            },
        ),
    )
    (warning,) = graph_warnings(m)
    assert warning.rule == "size_one_dim"
    assert warning.message.startswith(
        "batch_size (input_ids dim 0, attention_mask dim 0) should be dynamic but was 1 in "
        "every call"
    )
    assert warning.next_step == "observe one call with batch_size >= 2"
