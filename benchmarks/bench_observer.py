"""Observer per-call overhead: bare forward vs wrapped (while storing, and after store_n_calls).

Prints figures; it asserts nothing. Run: python benchmarks/bench_observer.py
"""

from __future__ import annotations

import statistics
import time

import torch

from observer_ci import InputObserver


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.lin(x)
        return y if mask is None else y * mask


def per_call_us(fn, n: int, rounds: int = 7) -> float:
    samples = []
    for _ in range(rounds):
        begin = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - begin) / n * 1e6)
    return statistics.median(samples)


def main() -> None:
    torch.set_num_threads(1)
    model = Small().eval()
    for batch in (1, 64):
        x = torch.randn(batch, 64)
        mask = torch.ones(batch, 64)
        with torch.no_grad():
            bare = per_call_us(lambda x=x, mask=mask: model(x, mask=mask), 2000)
            obs = InputObserver()
            # storing: every call clones inputs and outputs (a fresh observer per call)
            storing_samples = []
            for _ in range(300):
                obs = InputObserver()
                with obs(model, store_n_calls=1):
                    begin = time.perf_counter()
                    model(x, mask=mask)
                    storing_samples.append((time.perf_counter() - begin) * 1e6)
            storing = statistics.median(storing_samples)
            obs = InputObserver()
            with obs(model, store_n_calls=3):
                for _ in range(3):
                    model(x, mask=mask)
                after = per_call_us(lambda x=x, mask=mask: model(x, mask=mask), 2000)
        print(
            f"batch={batch:3d}  bare forward {bare:7.1f} us | wrapped while storing "
            f"{storing:7.1f} us (+{storing - bare:6.1f}) | wrapped after store_n_calls "
            f"{after:7.1f} us (+{after - bare:5.1f})"
        )


if __name__ == "__main__":
    main()
