"""What changed between base and head: op types, file size, package versions."""

from __future__ import annotations

from observer_ci.core.results import Footprint, GraphResult
from observer_ci.report.changes import op_diff_text, version_changes
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, RULES, Thresholds, compare
from tests.support.builders import export, model, observation, run

BASE_OPS = {"MatMul": 4, "Softmax": 1, "Add": 3}
HEAD_OPS = {"MatMul": 4, "Add": 3, "Cast": 8, "Gelu": 2}


def test_op_counts_diff_names_the_ops_largest_first():
    assert op_diff_text(BASE_OPS, HEAD_OPS) == "+8 Cast (new), +2 Gelu (new), -1 Softmax (gone)"
    assert op_diff_text(BASE_OPS, {**BASE_OPS, "Add": 5}) == "+2 Add"
    assert op_diff_text(BASE_OPS, BASE_OPS) == ""


def test_an_op_set_change_is_a_warning_naming_the_ops():
    head = run(model(export=export(op_counts=HEAD_OPS)))
    base = run(model(export=export(op_counts=BASE_OPS)), label="base")
    (reg,) = [r for r in compare(head, base, Thresholds(), set(DEFAULT_FAIL_ON))]
    assert reg.rule == "op_set_changed" and not reg.fails_build
    assert "new Cast, Gelu; gone Softmax" in reg.message and "+8 Cast (new)" in reg.message
    (gated,) = compare(head, base, Thresholds(), set(RULES))
    assert gated.fails_build  # fail_on can select it
    same_set = run(model(export=export(op_counts={**BASE_OPS, "Add": 9})))
    assert [r.rule for r in compare(same_set, base, Thresholds(), set(RULES))] == []
    no_counts = run(model(export=export()), label="base")  # an older results.json
    assert compare(head, no_counts, Thresholds(), set(RULES)) == []


def test_a_file_grown_past_its_limit_is_a_size_warning():
    base = run(model(export=export(file_size=1000)), label="base")
    grown = run(model(export=export(file_size=1101)))
    (reg,) = compare(grown, base, Thresholds(), set(DEFAULT_FAIL_ON))
    assert (reg.rule, reg.base_value, reg.head_value, reg.fails_build) == (
        "size_growth",
        1000,
        1101,
        False,
    )
    assert compare(run(model(export=export(file_size=1100))), base, Thresholds(), set()) == []


def test_a_version_change_is_named_with_the_outputs_that_moved():
    env = {"torch": "2.12.0", "onnxruntime": "1.31.1"}
    base = run(model("a"), model("b"), label="base", env=env)
    moved = model("b", observations=[observation(0, abs_=5e-5), observation(1)])
    head = run(model("a"), moved, env={**env, "torch": "2.13.0"})
    assert version_changes(base, head) == {"torch": ("2.12.0", "2.13.0")}
    report = render_report(head, [], base)
    line = next(x for x in report.splitlines() if "Versions changed" in x)
    assert "torch 2.12.0 → 2.13.0" in line and "outputs that moved with it: b" in line
    assert "a (abs" not in line  # a did not move
    unchanged = render_report(run(model("a"), env=env), [], run(model("a"), label="base", env=env))
    assert "Versions changed" not in unchanged


def test_the_model_details_show_the_op_changes():
    head = run(model(export=export(op_counts=HEAD_OPS)))
    base = run(model(export=export(op_counts=BASE_OPS)), label="base")
    assert "**Ops vs base:** +8 Cast (new), +2 Gelu (new), -1 Softmax (gone)" in render_report(
        head, [], base
    )


MIB = 1 << 20


def with_memory(name="m", export_mb=40.0, session_mb=10.0, run_mb=20.0, graph="model"):
    figures = Footprint(
        export_bytes=int(export_mb * MIB) if export_mb is not None else None,
        session_bytes=int(session_mb * MIB),
        run_bytes=int(run_mb * MIB),
        session_seconds=0.02,
    )
    return model(name, graphs=[GraphResult(graph, [0, 1], export=export(), footprint=figures)])


def test_memory_grown_past_its_limit_is_a_warning_naming_phase_and_figures():
    base = run(with_memory(), label="base")
    head = run(with_memory(export_mb=80.0, run_mb=25.0))
    (reg,) = compare(head, base, Thresholds(), set(DEFAULT_FAIL_ON))
    assert (reg.rule, reg.fails_build) == ("memory_growth", False)
    assert reg.message == "peak memory grew (> ×1.5): export 40 MiB → 80 MiB (×2)"
    assert (reg.base_value, reg.head_value) == (40 * MIB, 80 * MIB)
    (gated,) = compare(head, base, Thresholds(), set(RULES))
    assert gated.fails_build  # fail_on can select it
    report = render_report(head, [reg], base)
    assert "| ⚠️ | m | memory_growth | 40 MiB | 80 MiB |" in report
    assert "**Memory vs base** (added by each phase): export 40 MiB → 80 MiB (×2), " in report


def test_small_cached_or_missing_figures_are_never_compared():
    small_base = run(with_memory(export_mb=1.0), label="base")
    assert compare(run(with_memory(export_mb=10.0)), small_base, Thresholds(), set(RULES)) == []
    cached = run(with_memory(export_mb=None))  # restored from the export cache: not measured
    base = run(with_memory(export_mb=1.0, session_mb=1.0, run_mb=1.0), label="base")
    (reg,) = compare(cached, base, Thresholds(), set(RULES))
    assert "export" not in reg.message and "run 1 MiB → 20 MiB" in reg.message
    older = run(model("m"), label="base")  # a results.json without figures
    assert compare(run(with_memory(export_mb=500.0)), older, Thresholds(), set(RULES)) == []
    other_graph = run(with_memory(graph="decoder"), label="base")
    assert compare(run(with_memory(export_mb=500.0)), other_graph, Thresholds(), set(RULES)) == []
    report = render_report(run(with_memory()), [])
    assert "**Memory** (added by each phase): export 40 MiB · session 10 MiB in 20 ms" in report
