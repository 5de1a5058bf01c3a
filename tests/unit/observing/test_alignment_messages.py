"""The observer's refusals, word for word (a user reads them to fix their script), and the
dims a call family inherits from all the calls (``InputObserver.subset``)."""

import pytest
import torch

from observer_ci import InputObserver
from observer_ci.observing.observer import ObserverError

DYN = torch.export.Dim.DYNAMIC


def observe(model, calls, observer=None):
    obs = observer or InputObserver()
    with obs(model, store_n_calls=len(calls)):
        for args, kwargs in calls:
            model(*args, **kwargs)
    return obs


class Masked(torch.nn.Module):
    def forward(self, x, mask=None):
        return x if mask is None else x * mask


def refusal(obs) -> str:
    with pytest.raises(ObserverError) as caught:
        obs.infer_dynamic_shapes()
    return str(caught.value)


def test_a_dtype_change_names_every_call_and_the_fix():
    calls = [((torch.zeros(2, 3),), {}), ((torch.zeros(4, 3, dtype=torch.float64),), {})]
    assert refusal(observe(Masked(), calls)) == (
        "input 'x' changes dtype across calls (call 0: torch.float32, call 1: torch.float64); "
        "an ONNX input has one element type: cast before calling the model"
    )


def test_a_rank_change_shows_the_shapes_and_the_fix():
    calls = [((torch.zeros(2, 3),), {}), ((torch.zeros(2, 3, 4),), {})]
    assert refusal(observe(Masked(), calls)) == (
        "input 'x' changes rank across calls (call 0: (2, 3), call 1: (2, 3, 4)); an ONNX "
        "input has one rank: observe calls that keep the number of dims"
    )


def test_a_fill_in_of_another_dtype_is_blamed_not_the_calls():
    calls = [
        ((torch.zeros(2, 3),), {}),
        ((torch.zeros(4, 3),), {"mask": torch.ones(4, 3, dtype=torch.int64)}),
    ]
    obs = InputObserver(missing={"mask": torch.ones(2, 3)})
    assert refusal(observe(Masked(), calls, obs)) == (
        "input 'mask': the value given in missing= (value_if_missing=) has dtype "
        "torch.float32, the observed calls pass dtype torch.int64; give the fill-in value the "
        "dtype of the observed input"
    )


def test_calls_that_disagree_among_themselves_are_listed_with_the_fill_in():
    calls = [
        ((torch.zeros(2, 3),), {}),
        ((torch.zeros(4, 3),), {"mask": torch.ones(4, 3, dtype=torch.int64)}),
        ((torch.zeros(5, 3),), {"mask": torch.ones(5, 3, dtype=torch.int32)}),
    ]
    obs = InputObserver(missing={"mask": torch.ones(2, 3)})
    assert refusal(observe(Masked(), calls, obs)) == (
        "input 'mask' changes dtype across calls (call 0: torch.float32 (missing= value), "
        "call 1: torch.int64, call 2: torch.int32); an ONNX input has one element type: cast "
        "before calling the model"
    )


def test_no_call_with_every_input_is_refused_not_invented():
    class Two(torch.nn.Module):
        def forward(self, a=None, b=None):
            return a if b is None else b

    calls = [((), {"a": torch.zeros(2)}), ((), {"b": torch.zeros(3)})]
    assert refusal(observe(Two(), calls)) == (
        "At least one call to the observed model must pass every input: ['a', 'b'] were never "
        "passed together (call 0 has ['a']; call 1 has ['b']). Observe one call with all of "
        "them, or give the absent ones a value with missing= (value_if_missing=) so their "
        "shapes are known."
    )


def test_a_call_without_tensors_is_refused():
    calls = [((), {"a": None})]

    class One(torch.nn.Module):
        def forward(self, a=None):
            return a

    assert refusal(observe(One(), calls)) == (
        "no stored call passed a tensor: nothing to export (scalars and None are not inputs)"
    )


def test_a_structure_change_names_the_argument_and_both_calls():
    class Pair(torch.nn.Module):
        def forward(self, xs):
            return xs[0]

    calls = [(([torch.zeros(2), torch.zeros(2)],), {}), (([torch.zeros(3)],), {})]
    assert refusal(observe(Pair(), calls)) == (
        "Positional argument 0 has 1 tensors in call 1 but 2 in call 0: input 'xs' changes "
        "structure across calls ([T1s3] vs [T1s2,T1s2]); observe calls with the same nesting"
    )


@pytest.mark.parametrize(
    ("sizes", "kept"),
    [
        ((5, 5), [0]),  # every size here is at least 2: stays dynamic as in all the calls
        ((1, 1), []),  # torch.export would specialise a sample of 1: static here
        ((2, 2), [0]),  # the boundary: 2 is enough
    ],
)
def test_a_family_keeps_the_dims_that_varied_across_all_calls(sizes, kept):
    calls = [((torch.zeros(b, 3),), {}) for b in (*sizes, 7)]
    obs = observe(Masked(), calls)
    assert obs.dynamic_dims() == [[0]]
    family = obs.subset([0, 1])
    assert family.num_obs() == 2 and family.dynamic_dims() == [kept]
    assert family.infer_dynamic_shapes() == ({0: DYN} if kept else {},)


def test_a_family_does_not_inherit_past_the_rank_or_from_another_input():
    calls = [((torch.zeros(4, 3),), {"mask": torch.ones(4, 3)})] * 2
    calls.append(((torch.zeros(4, 5),), {"mask": torch.ones(4, 5)}))
    obs = observe(Masked(), calls)
    assert obs.dynamic_dims() == [[1], [1]]
    family = obs.subset([0, 1])
    assert family.dynamic_dims() == [[1], [1]]  # 3 in both, dynamic across all the calls
    family._inherited_dynamic = {"x": [1, 5]}  # a dim past the rank is ignored
    family._layout_cache = None
    assert family.dynamic_dims() == [[1], []]


def test_positions_and_names_of_the_observed_method():
    import inspect

    from observer_ci.observing.alignment import MethodSignature

    def method(x, y=None, z=None):
        return x

    sig = MethodSignature.of(inspect.signature(method))
    assert [sig.name_of(k) for k in (0, 2, "y")] == ["x", "z", "y"]
    for key, message in [
        (3, "position 3 is out of range, the method has parameters ['x', 'y', 'z']"),
        (-1, "position -1 is out of range, the method has parameters ['x', 'y', 'z']"),
        (True, "True is neither a parameter name nor a position"),
        (1.0, "1.0 is neither a parameter name nor a position"),
    ]:
        with pytest.raises(ObserverError) as caught:
            sig.name_of(key)
        assert str(caught.value) == message


def test_stand_ins_keep_the_dtype_of_the_input_they_stand_for():
    class Ids(torch.nn.Module):
        def forward(self, x, ids=None, flags=None):
            return x

    calls = [
        ((torch.zeros(2, 3),), {}),
        (
            (torch.zeros(4, 3),),
            {"ids": torch.ones(4, 5, dtype=torch.int64), "flags": torch.ones(5, dtype=torch.bool)},
        ),
        (
            (torch.zeros(6, 3),),
            {"ids": torch.ones(6, 7, dtype=torch.int64), "flags": torch.ones(5, dtype=torch.bool)},
        ),
    ]
    kwargs = observe(Ids(), calls).infer_arguments(0)
    assert kwargs["ids"].dtype == torch.int64 and kwargs["ids"].shape == (2, 0)
    # no dim varied: zeros of the seen shape
    assert kwargs["flags"].dtype == torch.bool and kwargs["flags"].shape == (5,)
    assert not kwargs["flags"].any()


def test_a_dynamic_size_of_zero_or_one_ranks_after_larger_ones():
    calls = [((torch.zeros(b, 3),), {}) for b in (0, 1, 2)]
    assert observe(Masked(), calls).candidate_indices() == [2, 1, 0]
