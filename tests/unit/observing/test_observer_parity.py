"""API parity with torch.onnx.InputObserver (torch 2.13) and onnx-diagnostic 0.9.x: the
keywords, forms and views code written for them uses (no export here)."""

import pytest
import torch
from torch.utils import _pytree as pytree

from observer_ci import InputObserver, ObserverError
from observer_ci.observing.compat import adopt_observer

DYN = torch.export.Dim.DYNAMIC


def t(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def observe(model, calls, observer=None, **kwargs):
    obs = observer or InputObserver()
    with obs(model, **kwargs):
        for args, kw in calls:
            model(*args, **kw)
    return obs


class Prefill(torch.nn.Module):
    def forward(self, input_ids=None, pixel_values=None, past=None):
        return input_ids * 2


class Variadic(torch.nn.Module):
    def forward(self, a, *args, **kwargs):
        return a - args[0] * args[1] + kwargs["x"] - kwargs["y"]


class KeywordOnly(torch.nn.Module):
    def forward(self, x, *, bias, scale: float = 1.0):
        return x * scale + bias


class DictInput(torch.nn.Module):
    def forward(self, batch):
        return batch["a"] + batch["b"]


def variadic_calls():
    return [
        ((t(5, 6), t(5, 6), t(5, 6)), {"x": t(5, 6), "y": t(1, 6)}),
        ((t(7, 7), t(7, 7), t(7, 7)), {"x": t(7, 7), "y": t(1, 7)}),
    ]


def test_errors_are_value_and_runtime_errors():
    assert issubclass(ObserverError, ValueError) and issubclass(ObserverError, RuntimeError)
    with pytest.raises(RuntimeError, match="No inputs were captured"):
        InputObserver().infer_dynamic_shapes()


def test_value_if_missing_is_missing_and_takes_positions():
    calls = [
        ((t(1, 8, dtype=torch.int64), t(1, 3, 4, 4)), {}),
        ((t(1, 1, dtype=torch.int64), None, t(1, 2, 8, 4)), {}),
        ((t(1, 1, dtype=torch.int64), None, t(1, 2, 9, 4)), {}),
    ]
    by_position = observe(Prefill(), calls, InputObserver(value_if_missing={1: t(0, 3, 4, 4)}))
    by_name = observe(Prefill(), calls, InputObserver(missing={"pixel_values": t(0, 3, 4, 4)}))
    expected = ({1: DYN}, {0: DYN}, {2: DYN})
    assert by_position.infer_dynamic_shapes() == by_name.infer_dynamic_shapes() == expected
    assert by_position.value_if_missing is by_position.missing
    with pytest.raises(ObserverError, match="not both"):
        InputObserver(missing={"a": 1}, value_if_missing={"a": 1})
    bad = observe(Prefill(), calls, InputObserver(value_if_missing={"typo": t(0)}))
    with pytest.raises(ObserverError, match="'typo'"):
        bad.infer_dynamic_shapes()


def test_dtype_error_blames_the_fill_in_value():
    calls = [((t(1, 8, dtype=torch.int64), t(1, 3, 4, 4)), {}), ((t(1, 1, dtype=torch.int64),), {})]
    obs = observe(Prefill(), calls, InputObserver(missing={"pixel_values": t(0, 3, 4, 4).half()}))
    with pytest.raises(ObserverError, match="value given in missing=.*float16.*float32"):
        obs.infer_dynamic_shapes()


def test_variadic_shapes_nest_like_torch_export_binds_them():
    ours = observe(Variadic(), variadic_calls())
    theirs = observe(Variadic(), variadic_calls(), torch.onnx.InputObserver())
    expected = {
        "a": {0: DYN, 1: DYN},
        "args": ({0: DYN, 1: DYN}, {0: DYN, 1: DYN}),
        "kwargs": {"x": {0: DYN, 1: DYN}, "y": {1: DYN}},
    }
    assert ours.infer_dynamic_shapes() == theirs.infer_dynamic_shapes() == expected
    with pytest.raises(RuntimeError, match="as_args_kwargs=True"):
        ours.infer_arguments()
    args, kwargs = ours.infer_arguments(as_args_kwargs=True)
    assert len(args) == 3 and list(kwargs) == ["x", "y"]
    Variadic()(*args, **kwargs)  # the arguments call the model
    assert ours.leaf_names() == ["a", "args_0", "args_1", "x", "y"]


def test_keyword_only_parameters_are_keywords():
    calls = [
        ((t(2, 3),), {"bias": t(2, 3), "scale": 2.0}),
        ((t(4, 3),), {"bias": t(4, 3), "scale": 2.0}),
    ]
    obs = observe(KeywordOnly(), calls)
    assert obs.infer_dynamic_shapes() == {"x": {0: DYN}, "bias": {0: DYN}, "scale": None}
    args, kwargs = obs.infer_arguments(as_args_kwargs=True)
    assert args == () and list(kwargs) == ["x", "bias", "scale"]
    KeywordOnly()(*args, **kwargs)


def test_a_dict_passed_positionally_is_a_keyword_for_torch_onnx_export():
    # torch.onnx.export takes a trailing dict in args for keyword arguments
    calls = [(({"a": t(2, 3), "b": t(2, 3)},), {}), (({"b": t(4, 3), "a": t(4, 3)},), {})]
    obs = observe(DictInput(), calls)
    assert obs.infer_dynamic_shapes() == {"batch": {"a": {0: DYN}, "b": {0: DYN}}}
    args, kwargs = obs.infer_arguments(as_args_kwargs=True)
    assert args == () and list(kwargs["batch"]) == ["a", "b"]


def test_no_call_with_every_input_is_refused_not_invented():
    class TwoOptional(torch.nn.Module):
        def forward(self, x=None, y=None):
            return x if y is None else y

    obs = observe(TwoOptional(), [((), {"x": t(2, 3)}), ((), {"y": t(1, 7)}), ((), {"y": t(1, 8)})])
    with pytest.raises(RuntimeError, match="At least one call to the observed model"):
        obs.infer_arguments()


def test_structure_is_compared_by_types_and_counts_not_key_names():
    class Bag:
        def __init__(self, names, tensors):
            self.names, self.tensors = list(names), list(tensors)

    pytree.register_pytree_node(
        Bag,
        lambda b: (b.tensors, b.names),
        lambda values, names: Bag(names, values),
        serialized_type_name="tests.Bag",
        flatten_with_keys_fn=lambda b: (
            [(pytree.MappingKey(n), v) for n, v in zip(b.names, b.tensors)],
            b.names,
        ),
    )

    class Model(torch.nn.Module):
        def forward(self, x, bag):
            return x + bag.tensors[0].sum()

    calls = [
        ((t(2, 3), Bag(["k0", "v0"], [t(2, 4), t(2, 4)])), {}),
        ((t(3, 3), Bag(["key_0", "value_0"], [t(2, 5), t(2, 5)])), {}),
    ]
    obs = observe(Model(), calls)
    assert obs.infer_dynamic_shapes() == ({0: DYN}, [{1: DYN}, {1: DYN}])
    calls.append(((t(3, 3), Bag(["k0"], [t(2, 5)])), {}))
    with pytest.raises(ObserverError, match="Positional argument 1 has 1 tensors"):
        observe(Model(), calls, store_n_calls=3).infer_dynamic_shapes()


def test_candidates_put_the_prefill_before_decode_steps():
    class Decoder(torch.nn.Module):
        def forward(self, input_ids, past=None):
            return input_ids.float().sum()

    calls = [
        ((t(1, 6, dtype=torch.int64),), {"past": []}),  # prefill: an empty cache
        ((t(1, 1, dtype=torch.int64),), {"past": [t(1, 2, 6, 4)]}),
        ((t(1, 1, dtype=torch.int64),), {"past": [t(1, 2, 7, 4)]}),
    ]
    obs = observe(Decoder(), calls)
    assert obs.candidate_indices()[0] == 0
    kwargs = obs.infer_arguments()
    assert kwargs["input_ids"].shape == (1, 6) and kwargs["past"][0].shape == (1, 2, 0, 4)
    # a call that did not pass an input at all ranks after complete ones
    calls[0] = ((t(1, 6, dtype=torch.int64),), {})
    assert observe(Decoder(), calls).candidate_indices()[-1] == 0

    # an absent input whose dims never varied would be made-up zeros: that call comes last,
    # even when it has the fewest size-1 dims
    class WithMemory(torch.nn.Module):
        def forward(self, input_ids, past=None, extra=None, memory=None):
            return input_ids.float().sum()

    memory = {"memory": t(1, 3, 4)}
    calls = [
        ((t(1, 6, dtype=torch.int64),), {"past": [t(1, 2, 5, 4)], "extra": t(1, 5)}),
        ((t(1, 1, dtype=torch.int64),), {**memory}),  # two absent, both with an empty form
        ((t(1, 1, dtype=torch.int64),), {"past": [t(1, 2, 7, 4)], "extra": t(1, 3), **memory}),
    ]
    assert observe(WithMemory(), calls).candidate_indices() == [2, 1, 0]


def test_remove_inputs_by_name_or_position():
    class Three(torch.nn.Module):
        def forward(self, x, y, z=None):
            return x + y

    calls = [
        ((), {"x": t(5, 6), "y": t(1, 6), "z": t(5, 6)}),
        ((), {"x": t(7, 7), "y": t(1, 7), "z": t(7, 7)}),
    ]
    obs = observe(Three(), calls)
    obs.remove_inputs(["z"])
    assert obs.infer_dynamic_shapes() == {"x": {0: DYN, 1: DYN}, "y": {1: DYN}}
    obs.remove_inputs([1])
    assert list(obs.infer_arguments()) == ["x"]
    with pytest.raises(ObserverError, match="variadic"):
        observe(Variadic(), variadic_calls()).remove_inputs(["kwargs"])


def test_info_is_a_read_only_view_shaped_like_the_reference():
    class Add(torch.nn.Module):
        def forward(self, x, y, add: bool = True):
            return (x + y, None) if add else (x - y, None)

    calls = [((t(2, 3), t(1, 3)), {"add": False}), ((t(4, 3), t(1, 3)), {"add": False})]
    obs = observe(Add(), calls)
    info = obs.info
    assert len(info) == 2 and info.signature_names == ["x", "y", "add"]
    assert info.inputs[1].args[0].shape == (4, 3) and info.inputs[1].cst_kwargs == {"add": False}
    assert len(info.flat_outputs[0]) == 2 and info.flat_outputs[0][1] is None
    assert pytree.tree_unflatten(info.flat_outputs[0], info.outputs_specs[0])[1] is None
    assert len(info.latencies) == 2
    assert [t is None for t in info.inputs[0].aligned_flat_list] == [False, False]
    with pytest.raises(AttributeError, match="read-only"):
        info.latencies = []


def test_adopting_torch_observer_takes_over_its_calls():
    theirs = observe(Variadic(), variadic_calls(), torch.onnx.InputObserver())
    ours = adopt_observer(theirs, Variadic())
    assert ours.num_obs() == 2
    assert ours.infer_dynamic_shapes() == theirs.infer_dynamic_shapes()
    assert torch.equal(ours.observations[1].outputs, theirs.info.flat_outputs[1][0])


def test_adopting_fill_ins_keeps_them_as_missing_values():
    calls = [
        ((), {"input_ids": t(1, 8), "pixel_values": t(1, 3, 4, 4)}),
        ((), {"input_ids": t(1, 1), "past": t(1, 2, 8, 4)}),
        ((), {"input_ids": t(1, 1), "past": t(1, 2, 9, 4)}),
    ]
    fill = {"pixel_values": t(0, 3, 4, 4)}
    theirs = observe(Prefill(), calls, torch.onnx.InputObserver(value_if_missing=fill))
    ours = adopt_observer(theirs, Prefill())
    assert "pixel_values" not in ours.observations[1].named
    assert ours.infer_dynamic_shapes() == theirs.infer_dynamic_shapes()


def test_adoption_refuses_unpaired_calls_and_strangers_with_a_reason():
    class Fails(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] == 3:
                raise ValueError("bad size")
            return x * 2

    theirs = torch.onnx.InputObserver()
    model = Fails()
    with theirs(model):
        model(t(2, 3))
        with pytest.raises(ValueError):
            model(t(3, 3))
        model(t(4, 3))
    refused = adopt_observer(theirs, model)
    assert refused.num_obs() == 0
    with pytest.raises(ObserverError, match="unpaired"):
        refused.infer_dynamic_shapes()
    with pytest.raises(ObserverError, match="not object"):
        adopt_observer(object(), model).infer_arguments()
    with pytest.raises(ObserverError, match="holds no call"):
        adopt_observer(torch.onnx.InputObserver(), model).infer_arguments()
