"""Timed runs that fit: a time budget per call with a stopping rule, torch on one thread."""

from __future__ import annotations

import time

import pytest
import torch

from observer_ci.core.constants import SLOW_RUN_SHARE, TIGHT_SPREAD, TORCH_MIN_TIMED_RUNS
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.replay import MIN_TIMED_RUNS, time_runs, time_torch_call, torch_threads


def slow_call() -> str:
    time.sleep(0.01)
    return "done"


def test_a_call_slow_for_its_budget_is_timed_the_minimum_number_of_times():
    calls = []
    result, durations = time_runs(lambda: calls.append(1) or "x", warmup=2, repeat=10, budget_s=0)
    assert result == "x" and len(durations) == MIN_TIMED_RUNS
    assert len(calls) == 1 + MIN_TIMED_RUNS  # the warm-up stopped after its first run too


def test_a_fast_call_gets_every_repeat_and_no_budget_means_every_repeat():
    _, fast = time_runs(lambda: None, warmup=1, repeat=10, budget_s=60.0)
    _, unbounded = time_runs(slow_call, warmup=0, repeat=5, budget_s=None)
    assert len(fast) == 10 and len(unbounded) == 5


def test_inputs_are_prepared_outside_the_timed_region():
    prepared = []

    def prepare() -> tuple[int]:
        time.sleep(0.02)
        prepared.append(1)
        return (len(prepared),)

    result, durations = time_runs(lambda n: n, warmup=1, repeat=3, prepare=prepare)
    assert result == 4 and len(prepared) == 4
    assert max(durations) < 0.02  # the 20 ms of each preparation are not in the timing


def test_torch_is_timed_on_the_threads_asked_and_restored_after():
    before = torch.get_num_threads()
    seen = []

    def method(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return x + 1

    out, durations = time_torch_call(method, (torch.ones(2),), {}, warmup=1, repeat=2, threads=1)
    assert seen == [1, 1, 1] and torch.equal(out, torch.full((2,), 2.0)) and len(durations) == 2
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


def test_torch_slow_for_its_budget_is_timed_once_and_results_record_both_minimums():
    calls = []

    def method(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x * 2

    _, durations = time_torch_call(method, (torch.ones(2),), {}, warmup=2, repeat=10, budget_s=0)
    assert len(durations) == TORCH_MIN_TIMED_RUNS < MIN_TIMED_RUNS  # torch judges nothing
    assert len(calls) == 1 + TORCH_MIN_TIMED_RUNS
    _, fast = time_torch_call(method, (torch.ones(2),), {}, warmup=1, repeat=6, budget_s=60.0)
    assert len(fast) == 6  # a fast call still gets every repeat
    recorded = RunConfig().recorded()["min_timed_runs"]
    assert recorded == {"onnxruntime": MIN_TIMED_RUNS, "torch": TORCH_MIN_TIMED_RUNS}


class Clock:
    """A clock that moves only when a call runs: each call lasts the next listed duration
    (the last one from then on), so a timing rule is tested exactly, whatever the load."""

    def __init__(self, seconds: list[float]) -> None:
        self.now, self.pending, self.calls = 0.0, list(seconds), 0

    def __call__(self) -> float:
        return self.now

    def call(self) -> None:
        self.calls += 1
        self.now += self.pending.pop(0) if len(self.pending) > 1 else self.pending[0]


def test_a_steady_slow_call_stops_at_the_minimum_once_its_runs_agree():
    budget = 1.0  # runs of 0.2 s: slow (SLOW_RUN_SHARE of it), 5 of them would fit
    assert SLOW_RUN_SHARE * budget <= 0.2
    clock = Clock([0.2, 0.2, 0.21, 0.2])
    _, durations = time_runs(clock.call, warmup=2, repeat=10, budget_s=budget, clock=clock)
    assert durations == pytest.approx([0.2, 0.21, 0.2])  # agree within TIGHT_SPREAD: enough
    assert clock.calls == 1 + MIN_TIMED_RUNS  # one slow warm-up is enough
    assert TIGHT_SPREAD * 0.2 >= 0.01  # the 0.21 run is within the spread


def test_a_noisy_slow_call_is_timed_on_until_its_runs_agree_or_the_budget_is_spent():
    # warm-up 0.2, then 0.2, 0.5, 0.2: spread over TIGHT_SPREAD, the minimum is not enough
    clock = Clock([0.2, 0.2, 0.5, 0.2])
    _, durations = time_runs(clock.call, warmup=2, repeat=10, budget_s=1.0, clock=clock)
    assert durations == pytest.approx([0.2, 0.5, 0.2, 0.2])  # stopped by the budget (1.1 s)


def test_a_call_under_the_slow_share_is_timed_as_before():
    clock = Clock([0.04])  # 40 ms < 5% of 1 s: every repeat, the usual warm-up
    _, durations = time_runs(clock.call, warmup=2, repeat=10, budget_s=1.0, clock=clock)
    assert len(durations) == 10 and clock.calls == 2 + 10
    _, real = time_runs(slow_call, warmup=2, repeat=10, budget_s=1.0)  # the real clock: 10 ms
    assert len(real) == 10
