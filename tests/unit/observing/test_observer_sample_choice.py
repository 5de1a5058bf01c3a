"""Which stored call becomes the export sample, and the batch flag on 0-d tensors.

The sample must have every input (an absent one would be exported as a stand-in), then avoid
dynamic sizes 0 and 1 (torch.export specialises them), then come first.
"""

from __future__ import annotations

import torch

from observer_ci import InputObserver

DYN = torch.export.Dim.DYNAMIC


class Optional2(torch.nn.Module):
    def forward(self, x, y=None, z=None):
        out = x.sum()
        for extra in (y, z):
            if extra is not None:
                out = out + extra.sum()
        return out


def observe(model, *calls, positional: bool = False):
    obs = InputObserver()
    with obs(model, store_n_calls=len(calls)):
        for call in calls:
            if positional:
                model(*call)
            else:
                model(**call)
    return obs


def t(*shape):
    return torch.randn(*shape)


def chosen(obs: InputObserver) -> torch.Tensor:
    """The x the default export sample carries."""
    return obs.infer_arguments()["x"]


def test_a_complete_call_with_size_one_still_wins_over_an_incomplete_one():
    calls = [dict(x=t(4, 4)), dict(x=t(1, 4), y=t(1, 2)), dict(x=t(7, 4))]
    obs = observe(Optional2(), *calls)
    assert obs.best_index() == 1


def test_dynamic_sizes_zero_and_one_are_avoided_but_static_ones_are_not_penalised():
    calls = [
        dict(x=t(1, 1), y=t(1, 2)),  # dynamic dim 0 is 1
        dict(x=t(0, 1), y=t(0, 2)),  # dynamic dim 0 is 0
        dict(x=t(3, 1), y=t(3, 2)),  # dim 1 of x is 1 but static: fine
    ]
    obs = observe(Optional2(), *calls)
    assert obs.dynamic_dims() == [[0], [0]]
    assert obs.best_index() == 2


def test_fewer_small_dynamic_sizes_rank_first():
    calls = [
        dict(x=t(1, 1), y=t(1, 2)),  # three dynamic sizes of 1: x dims 0 and 1, y dim 0
        dict(x=t(2, 1), y=t(2, 3)),  # one: x dim 1
        dict(x=t(1, 5), y=t(1, 3)),  # two: x dim 0, y dim 0
    ]
    obs = observe(Optional2(), *calls)
    assert obs.dynamic_dims() == [[0, 1], [0, 1]]
    assert obs.best_index() == 1


# -- the batch flag ---------------------------------------------------------------------------


class ScaleBy(torch.nn.Module):
    def forward(self, x, factor):
        return x * factor


def test_batch_flag_skips_0d_tensors():
    obs = observe(
        ScaleBy(),
        dict(x=t(2, 3), factor=torch.tensor(2.0)),
        dict(x=t(2, 5), factor=torch.tensor(3.0)),
    )
    assert obs.dynamic_dims(set_batch_dimension_for=True) == [[0, 1], []]
    assert obs.infer_dynamic_shapes(set_batch_dimension_for=True) == {
        "x": {0: DYN, 1: DYN},
        "factor": {},
    }
    assert obs.infer_dynamic_shapes(set_batch_dimension_for={"factor"}) == {
        "x": {1: DYN},
        "factor": {},
    }


def test_batch_flag_does_not_repeat_an_already_dynamic_dim_0():
    obs = observe(ScaleBy(), dict(x=t(2, 3), factor=t(2, 1)), dict(x=t(4, 3), factor=t(4, 1)))
    assert obs.dynamic_dims(set_batch_dimension_for=True) == [[0], [0]]


# -- what the runner reads from the observer -------------------------------------------------------


def test_input_summaries_list_dtype_shapes_and_dynamic_dims_per_input():
    calls = [dict(x=t(3, 4)), dict(x=t(5, 4), y=t(5, 2).double())]
    obs = observe(Optional2(), *calls)
    x, y = obs.input_summaries()
    assert (x.name, x.dtype, x.shapes, x.dynamic_dims) == (
        "x",
        "torch.float32",
        [[3, 4], [5, 4]],
        [0],
    )
    assert (y.name, y.dtype, y.shapes, y.dynamic_dims) == ("y", "torch.float64", [None, [5, 2]], [])
    flagged = obs.input_summaries(set_batch_dimension_for={"y"})
    assert [s.dynamic_dims for s in flagged] == [[0], [0]]


def test_aligned_inputs_keep_absent_ones_as_none():
    calls = [dict(x=t(3, 4)), dict(x=t(5, 4), y=t(5, 2))]
    obs = observe(Optional2(), *calls)
    first, second = obs.aligned_inputs(0), obs.aligned_inputs(1)
    assert torch.equal(first[0], calls[0]["x"]) and first[1] is None
    assert torch.equal(second[1], calls[1]["y"])
    assert obs.leaf_names() == ["x", "y"]


def test_call_arguments_rebuild_a_call_from_flat_tensors_as_copies():
    obs = observe(ScaleBy(), dict(x=t(2, 3), factor=t(2, 1)), dict(x=t(4, 3), factor=t(4, 1)))
    flat = [torch.ones(6, 3), torch.full((6, 1), 2.0)]
    args, kwargs = obs.call_arguments(flat)
    assert args == () and list(kwargs) == ["x", "factor"]
    assert torch.equal(kwargs["x"], flat[0]) and kwargs["x"] is not flat[0]
    assert torch.equal(ScaleBy()(*args, **kwargs), torch.full((6, 3), 2.0))
    positional = observe(ScaleBy(), (t(2, 3), t(2, 1)), (t(4, 3), t(4, 1)), positional=True)
    args, kwargs = positional.call_arguments(flat)
    assert kwargs == {} and len(args) == 2 and torch.equal(args[1], flat[1])
