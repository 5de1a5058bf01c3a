"""Real torch.onnx.export + onnxruntime through the runner (no mocks)."""

import json
import textwrap
from pathlib import Path

import onnx
import onnxruntime
import pytest
import torch

from observer_ci import InputObserver, observe
from observer_ci.core.results import (
    STATUS_EXPORT_FAILED,
    STATUS_OK,
    STATUS_SCRIPT_FAILED,
    RunResults,
)
from observer_ci.observing.registry import take_registered
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.export import export_observed
from observer_ci.pipeline.model_steps import process_model
from observer_ci.pipeline.scripts import run_script, run_scripts
from observer_ci.report.markdown import render_report
from tests.support import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"
FAST = RunConfig(warmup=1, repeat=3)


def quiet(_message: str) -> None:
    pass


@pytest.fixture(scope="module")
def examples_run(tmp_path_factory) -> RunResults:
    out = tmp_path_factory.mktemp("examples")
    scripts = [EXAMPLES / "mlp_classifier.py", EXAMPLES / "text_encoder.py"]
    return run_scripts(scripts, out, config=FAST, progress=quiet)


def test_examples_export_replay_and_probe(examples_run):
    models = examples_run.by_name()
    assert set(models) == {"mlp_classifier", "text_encoder"}
    for m in models.values():
        assert m.status == STATUS_OK, m.error
        assert m.export.ok and m.export.node_count > 0 and m.export.file_size > 0
        assert m.export.opset == 20
        assert len(m.observations) == 3
        for o in m.observations:
            assert o.success and o.abs < 1e-4
            assert o.torch_latency_s > 0 and o.ort_latency_s > 0
        assert m.probe.ran and m.probe.success, m.probe
    mlp = models["mlp_classifier"]
    # the batch dim is symbolic in the ONNX file, the feature dim is fixed
    dims = mlp.export.input_dims["x"]
    assert isinstance(dims[0], str) and dims[1] == 16
    seen_batches = {s[0] for s in mlp.inputs[0].shapes}
    assert mlp.probe.shapes["x"][0] not in seen_batches


def test_optional_input_absent_in_one_call_replays_with_empty_tensor(examples_run):
    enc = examples_run.by_name()["text_encoder"]
    first = enc.observations[0]
    assert first.n_none == 1 and first.n_empty == 1
    assert first.success
    assert [i.name for i in enc.inputs] == ["input_ids", "attention_mask", "memory"]
    assert enc.inputs[2].shapes[0] is None
    assert "normalize" in enc.dynamic_shapes


def test_encoder_inputs_share_named_dims_in_the_onnx_file(examples_run):
    import re

    enc = examples_run.by_name()["text_encoder"]
    dims = enc.export.input_dims
    assert dims["input_ids"] == dims["attention_mask"] == ["batch_size", "sequence_length"]
    assert dims["memory"][0] == "batch_size"
    assert not re.search(r"\bs\d+\b", repr(dims) + repr(enc.export.output_dims))
    mlp = examples_run.by_name()["mlp_classifier"]
    assert mlp.export.input_dims["x"] == ["batch_size", 16]
    # the first call had no memory: its stand-in takes that call's batch (2), not another's
    assert "memory:T1s2x0x32" in enc.observations[0].inputs
    # its row matched torch with the stand-in: no warning
    assert enc.observations[0].success and enc.observations[0].stand_ins == ["memory"]
    assert not [w.rule for w in enc.warnings if w.rule == "stand_in_input"]


def test_results_round_trip_through_json(examples_run, tmp_path):
    path = examples_run.write(tmp_path / "results.json")
    back = RunResults.read(path)
    assert back.to_dict() == examples_run.to_dict()
    assert back.environment["torch"] == torch.__version__
    assert back.environment["onnxruntime"] == onnxruntime.__version__


def test_check_discrepancies_rows_and_wrong_model_rows(tmp_path):
    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    class Pair(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    model = Double()
    obs = InputObserver()
    with obs(model):
        model(torch.ones(2, 3))
        model(torch.ones(4, 3))
    res = export_observed(model, obs, tmp_path / "double.onnx")
    assert res.ok, res.error
    rows = obs.check_discrepancies(res.onnx_path)
    assert [r["SUCCESS"] for r in rows] == [True, True]
    assert rows[0]["abs"] == 0.0 and rows[0][">0.1"] == 0.0
    assert rows[0]["inputs"].startswith("dict(x:T1s2x3")
    assert rows[1]["n_none"] == 0 and rows[1]["duration_torch"] > 0
    assert "inputs" not in obs.check_discrepancies(res.onnx_path, include_io=False)[0]

    pair, other = Pair(), InputObserver()
    with other(pair):
        pair(torch.ones(2, 3), torch.ones(2, 3))
    pair_res = export_observed(pair, other, tmp_path / "pair.onnx")
    assert pair_res.ok, pair_res.error
    wrong = obs.check_discrepancies(pair_res.onnx_path)  # two ONNX inputs, one tensor observed
    assert len(wrong) == 2 and all(r["SUCCESS"] is False for r in wrong)
    assert "match no observed input" in wrong[0]["error"]
    missing = obs.check_discrepancies(str(tmp_path / "nope.onnx"))
    assert missing[0]["SUCCESS"] is False and missing[0]["error"]


def test_model_that_cannot_export_is_a_result_not_a_crash(tmp_path):
    class PythonBranch(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent Python control flow
                return x + 1
            return x - 1

    model = PythonBranch()
    with observe(model, name="branch"):
        model(torch.ones(2, 3))
        model(torch.ones(3, 3))
    (entry,) = take_registered()
    result = process_model(entry, tmp_path, config=FAST, progress=quiet)
    assert result.status == STATUS_EXPORT_FAILED
    assert not result.export.ok and result.observations == []
    assert result.error and len(result.error) <= 3001 and "Error" in result.error
    assert result.export.seconds > 0 and not (tmp_path / "onnx" / "branch.onnx").exists()


def test_script_that_raises_keeps_models_observed_before(tmp_path):
    script = tmp_path / "half.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            import observer_ci

            model = torch.nn.Linear(3, 2).eval()
            with torch.no_grad(), observer_ci.observe(model, name="linear"):
                model(torch.randn(2, 3))
                model(torch.randn(5, 3))
            raise RuntimeError("dataset @octocat <b>not found</b>")
            """
        )
    )
    models = run_script(str(script), tmp_path / "out", config=FAST, progress=quiet)
    by_status = {m.status: m for m in models}
    assert by_status[STATUS_OK].name == "linear"
    failed = by_status[STATUS_SCRIPT_FAILED]
    assert "RuntimeError: dataset @octocat" in failed.error and "half.py" in failed.error
    assert failed.error.startswith("Traceback") and "observer_ci" not in failed.error
    assert failed.cause.kind == "script_error"
    assert failed.cause.summary == "RuntimeError: dataset @octocat <b>not found</b>"
    assert failed.cause.user_frame.endswith(
        'half.py:9: raise RuntimeError("dataset @octocat <b>not found</b>")'
    )


def test_training_mode_with_dropout_is_a_discrepancy_with_a_note(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))  # not eval()
    with observe(model, name="train"):
        model(torch.randn(2, 8))
        model(torch.randn(5, 8))
    (entry,) = take_registered()
    result = process_model(entry, tmp_path, config=FAST, progress=quiet)
    assert result.status == "discrepancy"
    assert any("training mode" in n for n in result.notes)
    model.eval()
    with observe(model, name="eval"):
        model(torch.randn(2, 8))
        model(torch.randn(5, 8))
    (entry,) = take_registered()
    result = process_model(entry, tmp_path, config=FAST, progress=quiet)
    assert result.status == STATUS_OK and result.notes == []


def test_script_missing_or_observing_nothing_is_reported(tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    (nothing,) = run_script(str(empty), tmp_path, config=FAST, progress=quiet)
    assert nothing.status == STATUS_SCRIPT_FAILED and "observed no model" in nothing.error
    (missing,) = run_script(str(tmp_path / "nope.py"), tmp_path, config=FAST, progress=quiet)
    assert missing.status == STATUS_SCRIPT_FAILED and "not found" in missing.error


def test_nested_inputs_and_another_method_export_and_match_by_name(tmp_path):
    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def encode(self, batch, *, scale: float = 1.0):
            return self.proj(batch["tokens"]) * scale + batch["extra"][0].mean()

    model = Encoder().eval()
    with torch.no_grad(), observe(model, name="enc", method_name="encode"):
        model.encode({"tokens": torch.randn(2, 5, 4), "extra": [torch.randn(2, 3)]}, scale=0.5)
        model.encode({"extra": [torch.randn(3, 3)], "tokens": torch.randn(3, 7, 4)}, scale=0.5)
    (entry,) = take_registered()
    result = process_model(entry, tmp_path, config=FAST, progress=quiet)
    assert result.status == STATUS_OK, result.error
    names = [i.name for i in result.inputs]
    assert names == ["batch_tokens", "batch_extra_0"]
    proto = onnx.load(result.export.onnx_path)
    assert [i.name for i in proto.graph.input] == result.export.input_names
    assert result.probe.ran and result.probe.success


def test_call_failing_on_empty_stand_in_gets_a_graph_of_its_own(tmp_path):
    class Masked(torch.nn.Module):
        def forward(self, x, mask=None):
            return x if mask is None else x * mask.unsqueeze(-1)

    model = Masked()
    with observe(model, name="masked"):
        model(torch.randn(2, 7, 4))  # no mask: an empty mask, which ORT rejects on the shared graph
        model(torch.randn(3, 9, 4), mask=torch.ones(3, 9))
        model(torch.randn(4, 5, 4), mask=torch.ones(4, 5))
    (entry,) = take_registered()
    result = process_model(entry, tmp_path, config=FAST, progress=quiet)
    assert result.status == "ok", result.error
    assert [(g.name, g.observation_indices) for g in result.graphs] == [
        ("model", [1, 2]),
        ("model_without_mask", [0]),
    ]
    assert "treats absent and empty differently" in result.graphs[1].reason
    assert result.export is result.graphs[0].export and result.export.input_names == ["x", "mask"]
    assert len(result.graphs[1].export.input_names) == 1  # x (named x_orig: returned as is)
    assert all(Path(g.export.onnx_path).parent.name == "masked" for g in result.graphs)
    first, *others = result.observations
    assert first.family == "model_without_mask" and first.success and not first.stand_ins
    assert all(o.success and o.family == "model" for o in others)
    report = render_report(RunResults(models=[result]), [], None)
    assert "| model_without_mask | 0 |" in report and "| model | 1, 2 |" in report


def test_reverse_order_runs_last_first_and_keeps_the_given_order(tmp_path):
    # base and head side by side: head goes last to first, so they start on other models
    seen = tmp_path / "seen.txt"
    scripts = []
    for name in ("a", "b", "c"):
        script = tmp_path / f"{name}.py"
        script.write_text(f"open({str(seen)!r}, 'a').write({name!r})\nraise ValueError({name!r})\n")
        scripts.append(script)
    journal = tmp_path / "journal.jsonl"
    results = run_scripts(
        scripts, tmp_path / "out", progress=quiet, journal=journal, reverse_order=True
    )
    assert seen.read_text() == "cba"
    assert [Path(m.script).name for m in results.models] == ["a.py", "b.py", "c.py"]
    begin = json.loads(journal.read_text().splitlines()[0])
    assert [Path(s).name for s in begin["scripts"]] == ["c.py", "b.py", "a.py"]
