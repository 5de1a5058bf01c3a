"""InputObserver semantics (no export here: see tests/integration)."""

import inspect

import pytest
import torch

from observer_ci import InputObserver, ObserverError

DYN = torch.export.Dim.DYNAMIC


class TwoInputs(torch.nn.Module):
    def forward(self, x, y=None, scale: float = 1.0, flag: bool = False, mode: str = "a"):
        out = x * scale
        if y is not None:
            out = out + y.sum()
        return out


class Nested(torch.nn.Module):
    def forward(self, inputs, pair):
        return inputs["a"] + inputs["b"].sum() + pair[0].sum() + pair[1][0].sum()


def observe(model, calls, **kwargs):
    obs = InputObserver(missing=kwargs.pop("missing", None))
    with obs(model, **kwargs):
        for args, kw in calls:
            model(*args, **kw)
    return obs


def t(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def test_positional_calls_give_tuple_with_varying_dims_dynamic():
    obs = observe(TwoInputs(), [((t(2, 3), t(2, 5)), {}), ((t(4, 3), t(4, 6)), {})])
    assert obs.infer_dynamic_shapes() == ({0: DYN}, {0: DYN, 1: DYN})
    args = obs.infer_arguments()  # among equally complete calls, the largest
    assert isinstance(args, tuple) and [a.shape for a in args] == [(4, 3), (4, 6)]


def test_keyword_calls_give_dict_in_signature_order():
    calls = [((), {"y": t(2, 5), "x": t(2, 3)}), ((), {"x": t(3, 3), "y": t(3, 5)})]
    obs = observe(TwoInputs(), calls)
    ds = obs.infer_dynamic_shapes()
    assert list(ds) == ["x", "y"]
    assert ds == {"x": {0: DYN}, "y": {0: DYN}}


def test_mixed_positional_and_keyword_are_named():
    calls = [((t(2, 3),), {"y": t(2, 5)}), ((t(3, 3), t(3, 5)), {})]
    obs = observe(TwoInputs(), calls)
    assert obs.infer_dynamic_shapes() == {"x": {0: DYN}, "y": {0: DYN}}
    assert set(obs.infer_arguments()) == {"x", "y"}


def test_nested_structures_are_mirrored_and_dict_keys_matched_by_key():
    model = Nested()
    calls = [
        ((), {"inputs": {"a": t(2, 3), "b": t(2, 7)}, "pair": (t(1, 4), [t(5)])}),
        # same dict, other key order, other sizes for "b" only
        ((), {"inputs": {"b": t(2, 9), "a": t(2, 3)}, "pair": (t(1, 4), [t(5)])}),
    ]
    obs = observe(model, calls)
    ds = obs.infer_dynamic_shapes()
    assert ds == {"inputs": {"a": {}, "b": {1: DYN}}, "pair": ({}, [{}])}
    args = obs.infer_arguments(0)
    assert args["inputs"]["b"].shape == (2, 7)
    assert isinstance(args["pair"], tuple) and isinstance(args["pair"][1], list)


def test_optional_input_absent_is_filled_empty_on_dynamic_dim():
    calls = [((t(2, 3),), {}), ((t(3, 3),), {"y": t(3, 4)}), ((t(5, 3),), {"y": t(5, 6)})]
    obs = observe(TwoInputs(), calls)
    flat = obs.infer_arguments(0, flat=True)
    assert flat[0].shape == (2, 3)
    # the last dynamic dim set to 0 (an empty tensor); y's dim 0 equals x's dim 0 in every
    # call, so the stand-in takes this call's batch (2), not the last seen one (5)
    assert flat[1].shape == (2, 0)
    # the default choice is a complete call, with its observed y (not a stand-in)
    assert obs.infer_arguments()["y"].shape[1] != 0


def test_optional_input_absent_with_static_shape_is_zeros():
    calls = [((t(2, 3),), {}), ((t(3, 3),), {"y": t(4, 4)})]
    obs = observe(TwoInputs(), calls)
    filled = obs.infer_arguments(0, flat=True)[1]
    assert filled.shape == (4, 4) and torch.count_nonzero(filled) == 0


def test_missing_supplies_vanished_kwargs():
    calls = [((), {"x": t(2, 3), "y": t(2, 4)}), ((), {"x": t(3, 3)})]
    obs = observe(TwoInputs(), calls, missing={"y": torch.zeros(3, 4)})
    flat = obs.infer_arguments(1, flat=True)
    assert flat[1].shape == (3, 4)
    assert obs.infer_dynamic_shapes() == {"x": {0: DYN}, "y": {0: DYN}}


def test_scalar_kwargs_differing_from_default_are_constants():
    calls = [((), {"x": t(2, 3), "scale": 2.0, "flag": False}), ((), {"x": t(3, 3), "scale": 2.0})]
    obs = observe(TwoInputs(), calls)
    assert obs.infer_dynamic_shapes() == {"x": {0: DYN}, "scale": None}
    args = obs.infer_arguments()
    assert args["scale"] == 2.0 and "flag" not in args


def test_constants_that_change_raise_a_clear_error():
    calls = [((), {"x": t(2, 3), "mode": "b"}), ((), {"x": t(3, 3), "mode": "c"})]
    obs = observe(TwoInputs(), calls)
    with pytest.raises(ObserverError, match="'mode' differs across calls"):
        obs.infer_dynamic_shapes()


def test_constant_present_in_one_call_only_is_a_change():
    calls = [((), {"x": t(2, 3), "scale": 3.0}), ((), {"x": t(3, 3)})]
    obs = observe(TwoInputs(), calls)
    with pytest.raises(ObserverError, match="<default>"):
        obs.infer_arguments()


def test_set_batch_dimension_for_names_positions_and_true():
    calls = [((t(2, 3), t(2, 5)), {}), ((t(2, 4), t(2, 5)), {})]
    obs = observe(TwoInputs(), calls)
    assert obs.infer_dynamic_shapes() == ({1: DYN}, {})
    assert obs.infer_dynamic_shapes(set_batch_dimension_for=True) == (
        {0: DYN, 1: DYN},
        {0: DYN},
    )
    assert obs.infer_dynamic_shapes(set_batch_dimension_for={"y"}) == ({1: DYN}, {0: DYN})
    assert obs.infer_dynamic_shapes(set_batch_dimension_for={0}) == ({0: DYN, 1: DYN}, {})


def test_set_batch_dimension_for_rejects_unknown_names_and_positions():
    obs = observe(TwoInputs(), [((t(2, 3),), {}), ((t(3, 3),), {})])
    with pytest.raises(ObserverError, match="'z' is not an observed tensor input"):
        obs.infer_dynamic_shapes(set_batch_dimension_for={"z"})
    with pytest.raises(ObserverError, match="position 9 is out of range"):
        obs.infer_dynamic_shapes(set_batch_dimension_for={9})


def test_dtype_change_is_an_error():
    obs = observe(TwoInputs(), [((t(2, 3),), {}), ((t(3, 3, dtype=torch.float64),), {})])
    with pytest.raises(ObserverError, match="changes dtype"):
        obs.infer_dynamic_shapes()


def test_rank_change_is_an_error():
    obs = observe(TwoInputs(), [((t(2, 3),), {}), ((t(3, 3, 1),), {})])
    with pytest.raises(ObserverError, match="changes rank"):
        obs.infer_arguments()


def test_infer_before_any_call_is_a_clear_runtime_error():
    obs = InputObserver()
    for fn in (obs.infer_arguments, obs.infer_dynamic_shapes):
        with pytest.raises(RuntimeError, match="no stored call"):
            fn()
    with pytest.raises(RuntimeError, match="no stored call"):
        obs.check_discrepancies("missing.onnx")


def test_store_n_calls_limits_storage_but_every_call_runs():
    model = TwoInputs()
    seen = []
    obs = InputObserver()
    with obs(model, store_n_calls=2):
        for n in range(2, 7):
            seen.append(model(t(n, 3)).shape[0])
    assert seen == [2, 3, 4, 5, 6]
    assert obs.num_obs() == 2


def test_observer_is_reusable_and_store_n_calls_counts_per_block():
    model = TwoInputs()
    obs = InputObserver()
    with obs(model, store_n_calls=1):
        model(t(2, 3))
        model(t(9, 3))
    with obs(model, store_n_calls=1):
        model(t(4, 3))
    assert obs.num_obs() == 2
    assert [o.args[0].shape[0] for o in obs.observations] == [2, 4]


def test_method_is_restored_exactly_even_on_exception():
    model = TwoInputs()
    original = model.forward
    obs = InputObserver()
    with pytest.raises(ZeroDivisionError), obs(model):
        assert inspect.signature(model.forward) == inspect.signature(original)
        assert model.forward != original
        raise ZeroDivisionError
    assert "forward" not in vars(model)
    assert model.forward == original


def test_a_call_that_raises_stores_nothing():
    model = TwoInputs()
    obs = InputObserver()
    with obs(model):
        model(t(2, 3))
        with pytest.raises(RuntimeError):
            model(t(2, 3), t(3, 4, 5, 6, 7).reshape(3, -1, 5).expand(3, 1, 5, 4))
        model(t(3, 3))
    assert obs.num_obs() == 2


def test_inputs_and_outputs_are_cloned():
    class InPlace(torch.nn.Module):
        def forward(self, x):
            return x

    model = InPlace()
    x = torch.ones(2, 2)
    obs = InputObserver()
    with obs(model):
        out = model(x)
    x.add_(1)
    out.add_(1)  # out is x: both mutated after the call
    assert torch.equal(obs.observations[0].args[0], torch.ones(2, 2))
    assert torch.equal(obs.observations[0].outputs, torch.ones(2, 2))


def test_method_name_observes_another_method():
    class WithEncode(torch.nn.Module):
        def encode(self, x, *, temperature: float = 1.0):
            return x / temperature

    model = WithEncode()
    obs = InputObserver()
    with obs(model, method_name="encode"):
        model.encode(t(2, 3))
        model.encode(t(2, 5))
    assert "encode" not in vars(model)
    assert obs.infer_dynamic_shapes() == ({1: DYN},)
    with pytest.raises(ValueError, match="no method 'decode'"), obs(model, method_name="decode"):
        pass


def test_infer_arguments_index_and_new_inputs():
    obs = observe(TwoInputs(), [((t(2, 3),), {"y": t(2, 4)}), ((t(3, 3),), {"y": t(3, 4)})])
    assert obs.infer_arguments(1)["x"].shape == (3, 3)
    with pytest.raises(IndexError, match="no stored call at index 5"):
        obs.infer_arguments(5)
    aligned = obs.infer_arguments({"x": t(7, 3)}, flat=True)
    assert [a.shape for a in aligned] == [(7, 3), (0, 4)]


def test_default_export_call_avoids_dynamic_sizes_zero_and_one():
    obs = observe(TwoInputs(), [((t(1, 3),), {}), ((t(4, 3),), {}), ((t(2, 3),), {})])
    assert obs.best_index() == 1
    assert obs.infer_arguments()[0].shape == (4, 3)


def test_none_positional_in_the_middle_switches_to_names():
    class Three(torch.nn.Module):
        def forward(self, x, mask=None, y=None):
            return x if y is None else x + y

    obs = observe(Three(), [((t(2, 3), None, t(2, 3)), {}), ((t(4, 3), None, t(4, 3)), {})])
    ds = obs.infer_dynamic_shapes()
    assert ds == {"x": {0: DYN}, "y": {0: DYN}}


def test_structure_change_of_an_input_is_an_error():
    calls = [((), {"inputs": {"a": t(2), "b": t(2)}, "pair": (t(1), [t(1)])})]
    calls.append(((), {"inputs": {"a": t(2), "c": t(2)}, "pair": (t(1), [t(1)])}))
    model = Nested()
    model.forward = lambda inputs, pair: inputs  # not a tensor op, so both calls succeed
    obs = InputObserver()
    with obs(model):
        for _, kw in calls:
            model(**kw)
    with pytest.raises(ObserverError, match="changes structure"):
        obs.infer_dynamic_shapes()


def test_scalar_equal_to_its_default_is_not_a_constant_whatever_its_type():
    calls = [((), {"x": t(2, 3), "scale": 1}), ((), {"x": t(3, 3)})]  # default is 1.0
    obs = observe(TwoInputs(), calls)
    assert obs.infer_dynamic_shapes() == {"x": {0: DYN}}
