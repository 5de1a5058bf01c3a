"""Torch against itself on tiny real modules: each reason named, the model left as found."""

from __future__ import annotations

import torch

from observer_ci.pipeline.diff import flatten_outputs
from observer_ci.pipeline.self_check import check_torch_against_itself

CALLS_SEEN = 0  # a global a module below mutates


class CachesLastInput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.last: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x if self.last is None else x + self.last
        self.last = x.detach().clone()
        return out


class CountsInAGlobal(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        global CALLS_SEEN
        CALLS_SEEN += 1
        return x * CALLS_SEEN


class RunningSum(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x.sum(0))
        return x + self.total


class Noisy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x)


def _check(model: torch.nn.Module, x: torch.Tensor):
    with torch.no_grad():
        recorded = flatten_outputs(model(x))  # the observed call
    return check_torch_against_itself(model, model, (x,), {}, recorded, atol=1e-4, rtol=1e-2)


def test_a_cached_input_is_named_and_restored():
    model = CachesLastInput()
    x = torch.ones(2, 3)
    check = _check(model, x)
    assert not check.reproducible
    # the re-run stores equal values, but a new tensor: the cache is named all the same
    assert "`last` (reassigned by the call)" in check.reason
    assert torch.equal(model.last, x)  # as the observed call left it


def test_a_mutated_global_is_named_and_restored():
    global CALLS_SEEN
    CALLS_SEEN = 0
    check = _check(CountsInAGlobal(), torch.ones(2, 3))
    assert not check.reproducible
    assert f"global `{__name__}.CALLS_SEEN` (int 1 → 2)" in check.reason
    assert CALLS_SEEN == 1


def test_a_mutated_buffer_is_named_and_restored():
    model = RunningSum()
    check = _check(model, torch.ones(2, 3))
    assert not check.reproducible and "buffer `total`" in check.reason
    assert model.total.tolist() == [2.0, 2.0, 2.0]


def test_random_ops_in_eval_mode_are_named():
    check = _check(Noisy().eval(), torch.zeros(2, 3))
    assert not check.reproducible
    assert check.reason.startswith("the model draws random numbers")
    assert "deterministic" in check.next_step


def test_a_deterministic_model_reproduces_in_one_run():
    model = torch.nn.Linear(3, 2)
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    check = _check(model, torch.ones(2, 3))
    assert check.reproducible and check.abs == 0.0 and check.reason is None
    assert len(calls) == 2  # the observed call and one re-run
