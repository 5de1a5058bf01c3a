"""Signatures users bring, exported for real and replayed: a dict passed positionally (also
through a non-forward method), ``*args``/``**kwargs``, and a ``torch.onnx.InputObserver``
registered with the runner."""

import textwrap

import pytest
import torch

from observer_ci import InputObserver
from observer_ci.core.results import STATUS_OBSERVE_FAILED, STATUS_OK
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.export import export_observed
from observer_ci.pipeline.scripts import run_script
from tests.support import REPO_ROOT


def t(*shape):
    return torch.randn(*shape)


class DictInput(torch.nn.Module):
    def forward(self, batch):
        return batch["a"] * 2 + batch["b"]


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def encode(self, batch: dict):
        return self.proj(batch["tokens"]) + batch["bias"]

    def forward(self, x):
        return x


class Variadic(torch.nn.Module):
    def forward(self, a, *args, **kwargs):
        return a - args[0] * args[1] + kwargs["x"] - kwargs["y"]


def test_readme_snippet_exports_a_positional_dict_and_checks_the_onnx_program():
    model, obs = DictInput(), InputObserver()
    with obs(model):
        model({"a": t(2, 3), "b": t(2, 3)})
        model({"b": t(5, 3), "a": t(5, 3)})
    args, kwargs = obs.infer_arguments(as_args_kwargs=True)
    program = torch.onnx.export(
        model, args, kwargs=kwargs, dynamic_shapes=obs.infer_dynamic_shapes(), dynamo=True
    )
    for source in (program, program.model_proto):
        rows = obs.check_discrepancies(source)
        assert [r["SUCCESS"] for r in rows] == [True, True], rows
        assert max(r["abs"] for r in rows) < 1e-5
    # torch's positional order: (program, atol, rtol, progress_bar, initializer, skip_none)
    sessions = []

    def initializer(model):
        import onnxruntime

        sessions.append(onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]))
        return sessions[-1]

    rows = obs.check_discrepancies(program, 1e-4, 0.1, False, initializer, True)
    assert len(sessions) == 1 and [r["SUCCESS"] for r in rows] == [True, True], rows


@pytest.mark.parametrize("kind", ["method_dict", "variadic"])
def test_runner_export_and_replay(kind, tmp_path):
    if kind == "method_dict":
        model, method = Encoder(), "encode"
        calls = [
            (({"tokens": t(1, 5, 4), "bias": t(1, 5, 3)},), {}),
            (({"tokens": t(2, 7, 4), "bias": t(2, 7, 3)},), {}),
        ]
    else:
        model, method = Variadic(), "forward"
        calls = [
            ((t(5, 6), t(5, 6), t(5, 6)), {"x": t(5, 6), "y": t(1, 6)}),
            ((t(7, 7), t(7, 7), t(7, 7)), {"x": t(7, 7), "y": t(1, 7)}),
        ]
    obs = InputObserver()
    with torch.no_grad(), obs(model, method_name=method):
        for args, kwargs in calls:
            getattr(model, method)(*args, **kwargs)
    result = export_observed(model, obs, tmp_path / "m.onnx", method_name=method)
    assert result.ok, result.error
    rows = obs.check_discrepancies(result.onnx_path)
    assert [r["SUCCESS"] for r in rows] == [True, True], rows


EXAMPLE = REPO_ROOT / "examples" / "torch_input_observer.py"

UNPAIRED = """
import torch
import observer_ci

model = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
observer = torch.onnx.InputObserver()
with torch.no_grad(), observer(model):
    model(torch.randn(2, 4))
    try:
        model(torch.randn(3, 7))  # raises inside the observer: inputs stored, no outputs
    except RuntimeError:
        pass
    model(torch.randn(5, 4))
observer_ci.register(model, observer, name="unpaired")
"""


def test_runner_takes_over_a_torch_observer_or_says_why_not(tmp_path):
    config = RunConfig(warmup=0, repeat=1)
    [example] = run_script(str(EXAMPLE), tmp_path / "example", config=config, progress=print)
    assert example.status == STATUS_OK, example.error
    assert example.n_observations == 3 and example.method_name == "encode"
    assert all(o.success for o in example.observations)
    assert example.probe.ran and example.probe.success, example.probe
    script = tmp_path / "unpaired.py"
    script.write_text(textwrap.dedent(UNPAIRED))
    [row] = run_script(str(script), tmp_path / "unpaired", config=config, progress=print)
    assert row.status == STATUS_OBSERVE_FAILED
    assert "unpaired" in row.error and "a call raised" in row.error
