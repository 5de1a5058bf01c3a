"""Same public API and results as the reference observers, minus their defects.

onnx-diagnostic's ``InputObserver`` and torch 2.13's ``torch.onnx.InputObserver`` watch the
same calls as ours; where a reference is right the outputs must be equal, where it has a
known defect ours must differ the documented way.
"""

import inspect
import tempfile

import pytest
import torch

pytest.importorskip(
    "onnx_diagnostic", reason="the reference (onnx-diagnostic, test extra) is not installed"
)

from onnx_diagnostic.investigate.input_observer import InputObserver as Reference  # noqa: E402
from torch.onnx import InputObserver as TorchObserver  # noqa: E402

from observer_ci import InputObserver, ObserverError  # noqa: E402
from observer_ci.pipeline.export import export_observed  # noqa: E402


class Model(torch.nn.Module):
    def forward(self, x, y=None, scale: float = 1.0):
        out = x * scale
        return out if y is None else out + y.sum()


class DictModel(torch.nn.Module):
    def forward(self, inputs):
        return inputs["a"].sum() + inputs["b"].sum()


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


CASES = {
    "positional": [((r(2, 3),), {}), ((r(4, 3),), {})],
    "two_positional": [((r(2, 3), r(2, 5)), {}), ((r(4, 3), r(4, 6)), {})],
    "keywords": [((), {"x": r(2, 3), "y": r(2, 4)}), ((), {"x": r(3, 3), "y": r(3, 4)})],
    "mixed": [((r(2, 3),), {"y": r(2, 4)}), ((r(3, 3),), {"y": r(3, 4)})],
    "optional": [
        ((r(2, 3),), {}),
        ((r(3, 3),), {"y": r(3, 4)}),
        ((r(5, 3),), {"y": r(5, 6)}),
    ],
    "constant": [((), {"x": r(2, 3), "scale": 2.0}), ((), {"x": r(3, 3), "scale": 2.0})],
}


def observe_both(calls, model_cls=Model, reference=Reference, **kwargs):
    observers = []
    for cls in (reference, InputObserver):
        model, obs = model_cls(), cls()
        with obs(model, **kwargs):
            for args, kw in calls:
                model(*args, **kw)
        observers.append(obs)
    return observers


def bound(args_kwargs, method=Model.forward):
    args, kwargs = args_kwargs
    return shapes(dict(inspect.signature(method).bind(None, *args, **kwargs).arguments))


def shapes(value):
    if isinstance(value, dict):
        return {k: shapes(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(shapes(v) for v in value)
    return tuple(value.shape) if isinstance(value, torch.Tensor) else value


@pytest.mark.parametrize("reference", [Reference, TorchObserver], ids=["onnx_diagnostic", "torch"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_dynamic_shapes_and_arguments_as_the_reference(case, reference):
    ref, ours = observe_both(CASES[case], reference=reference)
    assert ours.num_obs() == ref.num_obs()
    assert ours.infer_dynamic_shapes() == ref.infer_dynamic_shapes()
    assert ours.infer_dynamic_shapes(set_batch_dimension_for={"x"}) == ref.infer_dynamic_shapes(
        set_batch_dimension_for={"x"}
    )
    assert ours.infer_dynamic_shapes(set_batch_dimension_for=True) == ref.infer_dynamic_shapes(
        set_batch_dimension_for=True
    )
    for i in range(ours.num_obs()):
        if None in ours.aligned_inputs(i):
            continue  # a stand-in: see test_defect_stand_in_takes_the_calls_batch
        assert shapes(ours.infer_arguments(i)) == shapes(ref.infer_arguments(i))
        assert shapes(ours.infer_arguments(i, flat=True)) == shapes(
            ref.infer_arguments(i, flat=True)
        )
        # (args, kwargs) may split differently; both bind to the same parameters
        assert bound(ours.infer_arguments(i, as_args_kwargs=True)) == bound(
            ref.infer_arguments(i, as_args_kwargs=True)
        )
    # the default sample differs on purpose: ours is the likeliest to export (complete,
    # no dynamic size 0 or 1, then the largest), the references take the first complete one
    best = ours.best_index()
    assert shapes(ours.infer_arguments()) == shapes(ref.infer_arguments(best))


def test_defect_stand_in_takes_the_calls_batch():
    ref, ours = observe_both(CASES["optional"])  # call 0 has no y; y's batch follows x's
    assert shapes(ref.infer_arguments(0, flat=True)) == [(2, 3), (5, 0)]  # last seen batch
    assert shapes(ours.infer_arguments(0, flat=True)) == [(2, 3), (2, 0)]  # this call's


def test_store_n_calls_and_method_name_mean_the_same():
    class Enc(torch.nn.Module):
        def encode(self, x):
            return x + 1

    counts = []
    for cls in (Reference, InputObserver):
        model, obs = Enc(), cls()
        with obs(model, store_n_calls=2, method_name="encode"):
            for n in (2, 3, 4, 5):
                model.encode(r(n, 3))
        counts.append((obs.num_obs(), obs.infer_dynamic_shapes()))
    assert counts[0] == counts[1] == (2, ({0: torch.export.Dim.DYNAMIC},))


def test_check_discrepancies_rows_have_the_reference_keys_and_fixed_success(tmp_path):
    ref, ours = observe_both(CASES["two_positional"])
    model = Model()
    result = export_observed(model, ours, tmp_path / "m.onnx")
    assert result.ok, result.error
    fresh_ref = observe_both(CASES["two_positional"])[0]
    with pytest.raises(AssertionError):  # reference defect: needs an infer_* call first
        fresh_ref.check_discrepancies(result.onnx_path)
    our_rows = InputObserver.check_discrepancies(ours, result.onnx_path)  # no infer_* needed
    ref.infer_arguments()
    ref_rows = ref.check_discrepancies(result.onnx_path)
    assert len(our_rows) == len(ref_rows) == 2
    for ref_row, our_row in zip(ref_rows, our_rows):
        assert set(ref_row) <= set(our_row)
        assert our_row["abs"] == pytest.approx(ref_row["abs"], abs=1e-6)
        assert our_row["n_none"] == ref_row["n_none"]
        assert our_row["SUCCESS"] is True and isinstance(our_row["abs"], float)


def test_defect_exact_match_is_success():
    class Identity(torch.nn.Module):
        def forward(self, x):
            return x.to(torch.int64)

    # integer outputs compare exactly: the reference reports int 0 and SUCCESS False
    ref, ours = observe_both([((r(2, 3),), {}), ((r(4, 3),), {})], model_cls=Identity)
    with tempfile.TemporaryDirectory() as tmp:
        result = export_observed(Identity(), ours, f"{tmp}/m.onnx")
        assert result.ok, result.error
        ref.infer_arguments()
        ref_rows = ref.check_discrepancies(result.onnx_path)
        our_rows = ours.check_discrepancies(result.onnx_path)
    assert [row["SUCCESS"] for row in our_rows] == [True, True]
    assert all(row["abs"] == 0.0 and isinstance(row["abs"], float) for row in our_rows)
    assert [row["SUCCESS"] for row in ref_rows] == [False, False]  # the reference's defect


def test_defect_dict_key_order_is_matched_by_key():
    calls = [
        ((), {"inputs": {"a": r(2, 3), "b": r(2, 7)}}),
        ((), {"inputs": {"b": r(2, 9), "a": r(2, 3)}}),
    ]
    ref, ours = observe_both(calls, model_cls=DictModel)
    assert ours.infer_dynamic_shapes() == {"inputs": {"a": {}, "b": {1: torch.export.Dim.DYNAMIC}}}
    assert ref.infer_dynamic_shapes() != ours.infer_dynamic_shapes()


def test_defect_unknown_batch_names_and_dtype_changes_raise():
    ref, ours = observe_both(CASES["positional"])
    ref.infer_dynamic_shapes(set_batch_dimension_for={"typo"})  # silently ignored there
    with pytest.raises(ObserverError, match="'typo'"):
        ours.infer_dynamic_shapes(set_batch_dimension_for={"typo"})
    calls = [((r(2, 3),), {}), ((r(4, 3, dtype=torch.float64),), {})]
    ref, ours = observe_both(calls)
    ref.infer_dynamic_shapes()  # silently ignored there
    with pytest.raises(ObserverError, match="changes dtype"):
        ours.infer_dynamic_shapes()


def test_defect_no_bare_assertion_before_any_call():
    with pytest.raises(RuntimeError, match="no stored call"):
        InputObserver().infer_arguments()
    with pytest.raises((RuntimeError, AssertionError)):
        Reference().infer_arguments()
