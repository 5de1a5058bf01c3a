"""The cost of locating the first divergence, measured side by side with the plain replay.

Models of increasing depth (residual MLP blocks, the last one adding 0.01 only while
exporting, so every graph fails its replay) are exported once each. Per depth, in turn
(A B A B ...): A is the plain replay of one call (one onnxruntime run on a warm session and
one torch run), P what the pipeline's replay of that call costs (a session built, then 2
warm-up and 10 timed runs of each engine), B the localisation (``locate_first_divergence``:
the hooked torch run, the graph exposing every value, its session and run, the diverging
module's re-run). Prints the
medians, B's breakdown, and B / A and B / P (target: B / A <= 1, the issue's "at most 1x
the replay time extra"). Asserts nothing. A green model pays nothing: the localisation only
runs for a graph over its tolerance. Run:
    python benchmarks/bench_divergence.py [--depths 2 4 8 16] [--rounds 3] [--width 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from observer_ci.core.constants import DEFAULT_OPSET  # noqa: E402
from observer_ci.pipeline import divergence  # noqa: E402
from observer_ci.pipeline.onnx_exporter import onnx_export  # noqa: E402
from observer_ci.pipeline.ort_session import make_session  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, width: int, bad: bool) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.bad = bad

    def forward(self, x):
        y = self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        if self.bad and torch.compiler.is_exporting():
            y = y + 0.01
        return x + y


class Deep(torch.nn.Module):
    def __init__(self, depth: int, width: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width, k == depth - 1) for k in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def timed(fn) -> float:
    begin = time.perf_counter()
    fn()
    return time.perf_counter() - begin


PIPELINE_RUNS = 12  # the pipeline's replay of one call: warmup 2 + repeat 10 per engine


def measure(depth: int, width: int, rounds: int, folder: Path) -> dict[str, float]:
    model = Deep(depth, width).eval()
    x = torch.randn(8, 32, width)
    path = folder / f"deep{depth}.onnx"
    onnx_export(model, (x,), None, None, DEFAULT_OPSET).save(str(path))
    feeds = {"x": x.numpy()}
    session = make_session(str(path))

    def exposed() -> None:
        proto = onnx.load(str(path), load_external_data=False)
        divergence._run_exposed(proto, path.parent, feeds)

    def replay() -> None:
        session.run(None, feeds)
        with torch.no_grad():
            model(x)

    def locate() -> None:
        found = divergence.locate_first_divergence(model, str(path), (x,), {}, feeds, 1e-4, 0.1)
        assert found is not None and found.module == f"blocks.{depth - 1}", found

    replay()
    samples: dict[str, list[float]] = {k: [] for k in ("A", "session", "B", "hooks", "ort")}
    for _ in range(rounds):
        samples["A"].append(timed(replay))
        samples["session"].append(timed(lambda: make_session(str(path))))
        samples["B"].append(timed(locate))
        samples["hooks"].append(timed(lambda: divergence._record_calls(model, "forward", (x,), {})))
        samples["ort"].append(timed(exposed))
    m = {k: statistics.median(v) for k, v in samples.items()}
    m["pipeline"] = m["session"] + PIPELINE_RUNS * m["A"]
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=64)
    options = parser.parse_args()
    torch.set_num_threads(1)
    print(
        "depth  replay A (ms)  pipeline replay P (ms)  locate B (ms)  of which hooked torch, "
        "exposed ort (ms)  B/A   B/P"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for depth in options.depths:
            m = measure(depth, options.width, options.rounds, Path(tmp))
            ms = {k: 1000 * v for k, v in m.items()}
            print(
                f"{depth:5d}  {ms['A']:13.1f}  {ms['pipeline']:22.1f}  {ms['B']:13.1f}  "
                f"{ms['hooks']:21.1f}, {ms['ort']:15.1f}  {m['B'] / m['A']:4.2f}  "
                f"{m['B'] / m['pipeline']:4.2f}"
            )


if __name__ == "__main__":
    main()
