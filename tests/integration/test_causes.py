"""Every failure class, produced by a real tiny model, with the text a user reads:
the cause, their own source line, the next step (real torch.onnx.export, onnxruntime)."""

from pathlib import Path

import pytest
import torch
from torch.utils import _pytree as pytree

from observer_ci import observe
from observer_ci.action.artifact import parse_results
from observer_ci.core.results import (
    STATUS_EXPORT_FAILED,
    STATUS_OK,
    STATUS_ORT_FAILED,
    ModelResult,
    RunResults,
)
from observer_ci.observing.registry import take_registered
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.export import export_observed
from observer_ci.pipeline.graph_warnings import graph_warnings
from observer_ci.pipeline.model_steps import process_model
from observer_ci.pipeline.replay import make_session, replay_observation
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare, parse_fail_on

FAST = RunConfig(warmup=0, repeat=1)
HERE = Path(__file__).name


class DataDependentBranch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # the line the report must show
            return x + 1
        return x - 1


class FixesTheBatch(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 2:  # specialises the batch while tracing
            return x * 2
        return x * 3


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


class KeylessPair(Pair):
    pass


pytree.register_pytree_node(KeylessPair, lambda p: ([p.a, p.b], None), lambda c, _: KeylessPair(*c))


class ReturnsPair(torch.nn.Module):
    def forward(self, x):
        return Pair(x + 1, x * 2)


class TakesPair(torch.nn.Module):
    def forward(self, x, pair):
        return x + pair.a * pair.b


class Zeta(torch.nn.Module):
    def forward(self, x):
        return torch.special.zeta(x + 2, x + 1)


class UsesZeta(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.special = Zeta()

    def forward(self, x):
        return self.special(x) * 2


class Masked(torch.nn.Module):
    def forward(self, x, mask=None):
        return x if mask is None else x * mask.unsqueeze(-1)


def _observed(model, calls, name, **options):
    with torch.no_grad(), observe(model, name=name, **options):
        for args, kwargs in calls:
            model(*args, **kwargs)
    (entry,) = take_registered()
    return entry


def _two(*shape_tail, make=lambda x: ((x,), {})):
    return [make(torch.rand(b, *shape_tail)) for b in (2, 3)]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("causes")
    entries = [
        _observed(DataDependentBranch(), _two(3), "branch"),
        _observed(
            FixesTheBatch(),
            [((torch.rand(2, n),), {}) for n in (3, 5)],
            "fixed_batch",
            set_batch_dimension_for=True,
        ),
        _observed(ReturnsPair(), _two(3), "returns_pair"),
        _observed(
            TakesPair(),
            [((x, KeylessPair(x, x)), {}) for x in (torch.rand(2, 3), torch.rand(3, 3))],
            "keyless_pair",
        ),
        _observed(
            TakesPair(),
            [((x, Pair(x, x)), {}) for x in (torch.rand(2, 3), torch.rand(3, 3))],
            "plain_pair",
        ),
        _observed(UsesZeta(), _two(3), "zeta"),
        _observed(torch.nn.Linear(4, 2), [((torch.rand(3, 4),), {})], "single"),
        _observed(
            Masked(),
            [
                ((torch.randn(2, 7, 4),), {}),
                ((torch.randn(3, 9, 4),), {"mask": torch.ones(3, 9)}),
                ((torch.randn(4, 5, 4),), {"mask": torch.ones(4, 5)}),
            ],
            "masked",
        ),
    ]
    models = [process_model(e, out, config=FAST, progress=lambda m: None) for e in entries]
    return RunResults(models=models)


def _model(results, name):
    return results.by_name()[name]


def _report(results, name):
    run = RunResults(models=[_model(results, name)])
    return render_report(run, compare(run, None, Thresholds(), DEFAULT_FAIL_ON), max_chars=None)


def test_data_dependent_branch_names_the_users_line_and_torch_where(results):
    m = _model(results, "branch")
    assert m.status == STATUS_EXPORT_FAILED
    assert m.cause.kind == "data_dependent_branch"
    assert m.cause.user_frame.endswith("if x.sum() > 0:  # the line the report must show")
    assert f"{HERE}:" in m.cause.user_frame
    assert "torch.where" in m.cause.next_step and "torch.cond" in m.cause.next_step
    report = _report(results, "branch")
    assert "**Cause:** the model branches on the values inside a tensor" in report
    assert "**Your code:** " in report and "**Next step:** compute both branches" in report
    # the cause comes before the error tail, and is the regression's message
    assert "**Cause:**" in report
    assert "the model branches on the values" in report.split("<details>")[0]


def test_constraint_violation_names_dim_and_sizes(results):
    m = _model(results, "fixed_batch")
    assert m.cause.kind == "constraint_violation"
    assert m.status == STATUS_EXPORT_FAILED
    assert m.cause.summary == (
        "input x dim 0 is marked dynamic but was 2 in every call, yet the model code fixes it "
        "to 2 while tracing"
    )
    # the same dim also gets the warning that explains it
    assert any(w.rule == "size_one_dim" for w in m.warnings) is False
    assert "x.shape[0]" in m.cause.next_step
    # a dim 0 that never varied is marked by set_batch_dimension_for only: it may be no batch
    assert "leave x out of set_batch_dimension_for" in m.cause.next_step


def test_unregistered_output_type_is_named_with_how_to_register(results):
    m = _model(results, "returns_pair")
    assert m.cause.kind == "unregistered_type"
    assert "returns a" in m.cause.summary and "Pair" in m.cause.summary
    assert "register_pytree_node(Pair" in m.cause.next_step
    assert "register_dataclass(Pair)" in m.cause.next_step


def test_type_registered_without_keys_and_unregistered_input(results):
    keyless = _model(results, "keyless_pair")
    assert keyless.cause.kind == "unregistered_type"
    assert "KeylessPair is registered as a pytree without `flatten_with_keys_fn`" in (
        keyless.cause.summary
    )
    plain = _model(results, "plain_pair")
    assert plain.cause.kind == "unregistered_type"
    assert plain.cause.summary.startswith("input 'pair' is a ")
    assert "Pair holding tensors" in plain.cause.summary
    assert "register_pytree_node(Pair" in plain.cause.next_step


def test_op_without_onnx_translation_names_op_and_module(results):
    m = _model(results, "zeta")
    assert m.status == STATUS_EXPORT_FAILED
    assert m.cause.kind == "unsupported_op"
    assert "`prims.zeta.default`" in m.cause.summary
    assert "called in special (Zeta)" in m.cause.summary
    assert m.cause.user_frame and "torch.special.zeta(x + 2, x + 1)" in m.cause.user_frame
    assert "custom_translation_table" in m.cause.next_step


def test_call_failing_on_its_stand_in_gets_a_graph_without_it(results):
    m = _model(results, "masked")
    assert m.status == STATUS_OK, m.error
    shared, own = m.graphs
    assert shared.observation_indices == [1, 2] and own.observation_indices == [0]
    assert "did not pass mask" in own.reason and "absent and empty differently" in own.reason
    assert [o.family for o in m.observations] == [own.name, shared.name, shared.name]
    assert all(o.success for o in m.observations)
    # every row matched torch: nothing to warn about stand-ins
    assert not [w for w in m.warnings if w.rule == "stand_in_input"]


def test_onnxruntime_failure_on_a_call_names_the_stand_in(tmp_path):
    # one shared graph, as before the runner splits the call off: the row says why it failed
    entry = _observed(
        Masked(),
        [
            ((torch.randn(2, 7, 4),), {}),
            ((torch.randn(3, 9, 4),), {"mask": torch.ones(3, 9)}),
            ((torch.randn(4, 5, 4),), {"mask": torch.ones(4, 5)}),
        ],
        "masked_shared",
    )
    exported = export_observed(entry.model, entry.observer, tmp_path / "m.onnx")
    assert exported.ok, exported.error
    session = make_session(exported.onnx_path)
    row = replay_observation(
        entry.observer,
        0,
        session,
        method=entry.model.forward,
        atol=1e-4,
        rtol=0.1,
        hist=(),
        warmup=0,
        repeat=1,
    ).result
    assert not row.success and row.cause.kind == "ort_failure"
    assert row.cause.summary.startswith("onnxruntime failed on call 0 in the Mul node")
    # the stand-in takes the call's batch (2), not the last seen one (4)
    assert "This call did not pass mask (fed as 2×0)" in row.cause.summary
    assert "missing={'mask': value}" in row.cause.next_step
    model = ModelResult(name="masked", script="", status=STATUS_ORT_FAILED)
    model.inputs = entry.observer.input_summaries()
    model.observations = [row]
    warned = [w for w in graph_warnings(model) if w.rule == "stand_in_input"]
    assert warned and "the row did not match torch" in warned[0].message


def test_warning_rules_gate_only_when_selected(results):
    run = RunResults(models=[_model(results, "single")])
    default = compare(run, None, Thresholds(), DEFAULT_FAIL_ON)
    single = [r for r in default if r.rule == "single_call"]
    assert single and not single[0].fails_build
    selected = compare(run, None, Thresholds(), parse_fail_on("default,single_call"))
    assert [r.fails_build for r in selected if r.rule == "single_call"] == [True]


def test_causes_round_trip_through_results_json(results, tmp_path):
    back = RunResults.read(results.write(tmp_path / "results.json"))
    assert back.to_dict() == results.to_dict()
    # the publish job type-checks every field of an untrusted results.json
    assert parse_results(results.to_dict(), "payload").to_dict() == results.to_dict()
    masked = back.by_name()["masked"]
    assert [g.observation_indices for g in masked.graphs] == [[1, 2], [0]]
    assert "did not pass mask" in masked.graphs[1].reason
    branch = back.by_name()["branch"]
    assert branch.cause.kind == branch.graphs[0].export.cause.kind == "data_dependent_branch"


class BranchOnBatch(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] >= 5:  # the export sample (batch 3) takes the other branch
            return x * 2
        return x * 3


def test_probe_mismatch_makes_the_badge_fail_with_a_cause(tmp_path):
    entry = _observed(BranchOnBatch(), [((torch.rand(b, 3),), {}) for b in (3, 4)], "size_branch")
    m = process_model(entry, tmp_path, config=FAST, progress=lambda message: None)
    assert all(o.success for o in m.observations)
    assert m.probe.state == "exceeded tolerance" and m.probe.shapes == {"x": [5, 3]}
    # before: status "ok" (✅ badge) while probe_failed failed the build
    assert m.status == "probe_failed"
    assert m.cause.summary.startswith("at sizes never observed (x 5×3) onnxruntime and torch")
    assert "torch.cond" in m.cause.next_step
    run = RunResults(models=[m])
    regressions = compare(run, None, Thresholds(), DEFAULT_FAIL_ON)
    assert [r.rule for r in regressions if r.fails_build] == ["probe_failed"]
    report = render_report(run, regressions, max_chars=None)
    assert "probe_failed" in report and "size_branch" in report


def _baked_batch_onnx(path):
    """A graph whose batch axis is named but whose Reshape bakes batch 1 (as torch.export
    does for generate() observed on one prompt)."""
    from onnx import TensorProto, helper, save

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", "sequence_length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None])
    pad = helper.make_tensor("pad", TensorProto.FLOAT, [1, 1], [0.0])
    nodes = [helper.make_node("Concat", ["x", "pad"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "baked", [x], [y], initializer=[pad])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    save(proto, str(path))
    return path


def test_probe_failure_names_the_dim_and_the_size_seen_in_every_call(tmp_path):
    from observer_ci.core.results import InputInfo, ModelResult
    from observer_ci.pipeline.graph_warnings import graph_warnings
    from observer_ci.pipeline.probe import run_probe
    from observer_ci.pipeline.replay import make_session

    model = torch.nn.Identity()
    entry = _observed(
        model,
        [((torch.rand(1, n),), {}) for n in (4, 6)],
        "baked",
        set_batch_dimension_for=True,
    )
    session = make_session(_baked_batch_onnx(tmp_path / "baked.onnx"))
    probe = run_probe(entry.observer, model, session, set_batch_dimension_for=True)
    assert not probe.ok and "Concat" in probe.error
    assert probe.cause.kind == "probe_failure"
    assert probe.cause.summary == (
        "the ONNX graph fails when batch_size (input dim 0) is 2, a size never observed: "
        "batch_size was 1 in every call, and torch.export baked 1 into the graph"
    )
    assert probe.cause.next_step.startswith("observe at least one call with batch_size = 2")
    summaries = entry.observer.input_summaries(True)
    result = ModelResult(
        name="baked",
        script="",
        status="probe_failed",
        n_observations=2,
        inputs=[
            InputInfo(s.name, s.dtype, s.shapes, s.dynamic_dims, ["batch_size", "sequence_length"])
            for s in summaries
        ],
        probe=probe,
    )
    rules = {w.rule: w.message for w in graph_warnings(result)}
    assert rules["size_one_dim"].startswith("batch_size (input dim 0) should be dynamic but was 1")
    assert rules["probe_seen_size"] == (
        "the unseen-shape probe failed and batch_size (input dim 0) was 1 in every call "
        "(probed with 2): the graph may only work for batch_size = 1"
    )


def test_one_observed_call_warns_which_shapes_the_file_accepts(results):
    m = _model(results, "single")
    assert m.status == "ok" and m.probe.reason == "no dynamic dimension to probe"
    (warning,) = m.warnings
    assert warning.rule == "single_call"
    assert warning.message == (
        "only one call was observed: every dim is static, the ONNX file accepts only input 3×4"
    )
    assert warning.next_step.startswith("observe at least two calls with different sizes")
    report = _report(results, "single")
    assert "single_call" in report
    assert "no regression fails the build" in report
