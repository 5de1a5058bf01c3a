"""Whole-process speed of observer-ci, measured side by side (ratios of interleaved runs).

1. ``observer-ci run EXAMPLE`` vs the bare essential pipeline (``bare_pipeline.py``), per
   shipped example (target: <= 1.10x).
2. A cache hit vs a cold run of ``observer-ci run --cache-dir`` (target: <= 0.5x).
3. ``baseline: base`` as the action runs it now (base and head side by side, shared cache,
   paired timing) vs one after the other without cache, on a git repository whose head
   commit changes one model (target: <= 0.65x on 2 cores).
4. The ONNX registry rebuilt for every export vs built once per process: the saving per
   extra model or retried export sample.

Each figure is the median of per-pair ratios; A and B alternate (A B B A ...) so a machine
that drifts moves both. Whole-process figures come as wall-clock and CPU (user + system of
the child processes) ratios: on a machine shared with other jobs the CPU ratio moves less.
The load average is printed before and after each part. Part 1 also prints the median
seconds of each phase (observer-ci's ``phase_seconds``, the bare pipeline's own; "other"
is the rest of the process: interpreter, imports, report, exit). Prints figures, asserts
nothing. Shared machines are noisy: raise ``--rounds`` and read the spread (min..max).
``--pin 0`` runs parts 1 and 2 on one processor (``taskset``): torch's and onnxruntime's
thread pools then have one thread, so other jobs' load cannot stall a thread a parallel
region waits for (on a loaded 2-core machine that swings torch timings 50x). Run:
    python benchmarks/bench_speed.py [--rounds 3] [--no-llama] [--only run,cache,base,registry]
        [--pin CPUS]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "mlp": REPO / "examples" / "mlp_classifier.py",
    "text": REPO / "examples" / "text_encoder.py",
    "llama": REPO / "examples" / "tiny_llama_generate.py",
}
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


@dataclass
class Timing:
    """One measured run: wall-clock seconds, CPU seconds of its child processes, phases."""

    wall: float
    cpu: float | None = None
    phases: dict[str, float] = field(default_factory=dict)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


PIN: list[str] = []  # ["taskset", "-c", CPUS] with --pin


def timed(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> Timing:
    cmd = [*PIN, *cmd]
    cpu, begin = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env or ENV, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - begin, children_cpu() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited with {proc.returncode}: {proc.stderr[-2000:]}")
    phases = next(
        (
            json.loads(line[len("phases: ") :])
            for line in proc.stdout.splitlines()[::-1]
            if line.startswith("phases: ")
        ),
        {},
    )
    return Timing(seconds, cpu, phases)


def run_phases(timing: Timing, out: Path) -> Timing:
    """Adds the phases observer-ci recorded in ``out/results.json`` (summed over models)."""
    models = json.loads((out / "results.json").read_text())["models"]
    for key in ("script", "infer", "export", "replay", "probe"):
        seconds = [m.get("phase_seconds", {}).get(key, 0.0) for m in models]
        timing.phases[key] = max(seconds) if key == "script" else sum(seconds)  # script: shared
    return timing


def as_timing(value: float | Timing) -> Timing:
    return value if isinstance(value, Timing) else Timing(value)


def paired(
    a: Callable[[], float | Timing], b: Callable[[], float | Timing], rounds: int
) -> dict[str, object]:
    """Median and spread of a/b over interleaved pairs (A B, B A, A B, ...)."""
    pairs: list[tuple[Timing, Timing]] = []
    for r in range(rounds):
        if r % 2 == 0:
            ta = as_timing(a())
            tb = as_timing(b())
        else:
            tb = as_timing(b())
            ta = as_timing(a())
        pairs.append((ta, tb))
    ratios = [ta.wall / tb.wall for ta, tb in pairs]
    figure: dict[str, object] = {
        "ratio": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "a": statistics.median(ta.wall for ta, _ in pairs),
        "b": statistics.median(tb.wall for _, tb in pairs),
        "pairs": pairs,
    }
    if all(ta.cpu and tb.cpu for ta, tb in pairs):
        cpu = [ta.cpu / tb.cpu for ta, tb in pairs]  # type: ignore[operator]
        figure.update(cpu=statistics.median(cpu), cpu_min=min(cpu), cpu_max=max(cpu))
    return figure


def show(label: str, figure: dict[str, object], a: str, b: str, target: str) -> None:
    cpu = (
        f"; cpu {figure['cpu']:.2f}x (min {figure['cpu_min']:.2f}, max {figure['cpu_max']:.2f})"
        if "cpu" in figure
        else ""
    )
    print(
        f"{label:34s} {figure['ratio']:5.2f}x  (min {figure['min']:.2f}, max {figure['max']:.2f}; "
        f"{a} {figure['a']:.1f} s, {b} {figure['b']:.1f} s{cpu}; target {target})",
        flush=True,
    )


def show_phases(figure: dict[str, object], a: str, b: str) -> None:
    for side, index in ((a, 0), (b, 1)):
        runs = [pair[index] for pair in figure["pairs"]]  # type: ignore[attr-defined]
        keys = list(dict.fromkeys(k for t in runs for k in t.phases))
        medians = {k: statistics.median(t.phases.get(k, 0.0) for t in runs) for k in keys}
        other = statistics.median(t.wall - sum(t.phases.values()) for t in runs)
        text = ", ".join(f"{k} {v:.2f}" for k, v in medians.items())
        print(f"   {side:5s} phases (s): {text}, other {other:.2f}", flush=True)


def observer_run(example: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "observer_ci",
        "run",
        str(example),
        "--out",
        str(out),
        "--no-gate",
        *extra,
    ]


def bench_run_vs_bare(names: list[str], rounds: int, tmp: Path) -> None:
    print(f"== observer-ci run vs the bare pipeline (no cache); {load()}")
    for name in names:
        figure = paired(
            lambda n=name: run_phases(timed(observer_run(EXAMPLES[n], tmp / "run")), tmp / "run"),
            lambda n=name: timed(
                [
                    sys.executable,
                    str(REPO / "benchmarks" / "bare_pipeline.py"),
                    n,
                    str(tmp / "bare"),
                ]
            ),
            rounds,
        )
        show(f"{name}: run / bare", figure, "run", "bare", "<= 1.10x")
        show_phases(figure, "run", "bare")
    print(f"   {load()}")


def bench_cache(names: list[str], rounds: int, tmp: Path) -> None:
    print(f"== cache hit vs cold run (observer-ci run --cache-dir); {load()}")
    for name in names:
        warm = tmp / f"warm-{name}"
        timed(observer_run(EXAMPLES[name], tmp / "warm-out", "--cache-dir", str(warm)))

        def cold(n: str = name) -> Timing:
            shutil.rmtree(tmp / "cold", ignore_errors=True)
            return timed(observer_run(EXAMPLES[n], tmp / "out", "--cache-dir", str(tmp / "cold")))

        figure = paired(
            lambda n=name, w=warm: timed(
                observer_run(EXAMPLES[n], tmp / "out", "--cache-dir", str(w))
            ),
            cold,
            rounds,
        )
        show(f"{name}: hit / cold", figure, "hit", "cold", "<= 0.5x")


def make_pr_repo(root: Path, names: list[str]) -> str:
    """A git repository: base commit with the examples, head commit changing one model."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, check=True, capture_output=True, text=True
        ).stdout.strip()

    root.mkdir(parents=True)
    git("init", "-q", "-b", "main")
    git("config", "user.email", "bench@example.invalid")
    git("config", "user.name", "bench")
    (root / "observe").mkdir()
    for name in names:
        shutil.copy(EXAMPLES[name], root / "observe" / EXAMPLES[name].name)
    git("add", "-A")
    git("commit", "-qm", "base")
    base = git("rev-parse", "HEAD")
    changed = root / "observe" / EXAMPLES["text"].name  # the pull request changes one model
    changed.write_text(changed.read_text().replace("h = self.mix(h)", "h = self.mix(h).relu()"))
    git("commit", "-qam", "head")
    return base


def bench_base_and_head(names: list[str], rounds: int, tmp: Path) -> None:
    import json

    from observer_ci.action.settings import Settings
    from observer_ci.action.workspace import (
        load_baseline,
        run_base_and_head,
        run_scripts_subprocess,
    )

    print(f"== baseline: base, {os.cpu_count()} cores: side by side vs in turn; {load()}")
    repo = tmp / "repo"
    base_sha = make_pr_repo(repo, [n for n in names if n != "llama"] or ["text"])
    event = tmp / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 1, "base": {"sha": base_sha}}}))
    env = {
        **ENV,
        "GITHUB_WORKSPACE": str(repo),
        "GITHUB_EVENT_PATH": str(event),
        "INPUT_SCRIPT": "observe/*.py",
        "INPUT_BASELINE": "base",
        "INPUT_REPEAT": "10",
    }

    def sequential() -> float:  # the action before: base, then head, no cache
        settings = Settings.from_env(env, dry_run=True)
        out = tmp / "seq"
        begin = time.perf_counter()
        load_baseline(settings, out, [], env)
        run_scripts_subprocess(
            settings.scripts, out / "head", label="head", settings=settings, env=env
        )
        return time.perf_counter() - begin

    def side_by_side(cache: str) -> Callable[[], float]:
        def run() -> float:
            if cache == "cold":
                shutil.rmtree(repo / ".cache", ignore_errors=True)
            settings = Settings.from_env({**env, "INPUT_CACHE_DIR": ".cache"}, dry_run=True)
            begin = time.perf_counter()
            base, head = run_base_and_head(settings, tmp / "par", [], env)
            seconds = time.perf_counter() - begin
            if base is None or any(m.status != "ok" for m in [*base.models, *head.models]):
                raise RuntimeError("a base or head model failed in the side-by-side run")
            models = [*base.models, *head.models]
            hits.append(f"{sum(bool(m.export and m.export.cached) for m in models)}/{len(models)}")
            return seconds

        return run

    hits: list[str] = []
    show(
        "side by side (empty cache) / in turn",
        paired(side_by_side("cold"), sequential, rounds),
        "side by side",
        "in turn",
        "<= 0.65x",
    )
    print(f"   exports restored from the cache (base+head): {', '.join(hits)}")
    hits.clear()
    show(
        "side by side (cache of the last run)",
        paired(side_by_side("warm"), sequential, rounds),
        "side by side",
        "in turn",
        "<= 0.65x",
    )
    print(f"   exports restored from the cache (base+head): {', '.join(hits)}")


def bench_registry(rounds: int) -> None:
    """What building the ONNX registry once per process saves per extra model."""
    code = (
        "import time, torch\n"
        "from torch.onnx._internal.exporter import _registration\n"
        "from observer_ci.pipeline.onnx_exporter import onnx_registry\n"
        "onnx_registry(20)\n"
        "t = time.perf_counter(); _registration.ONNXRegistry.from_torchlib(opset_version=20)\n"
        "build = time.perf_counter() - t\n"
        "t = time.perf_counter(); onnx_registry(20)\n"
        "print(build, time.perf_counter() - t)\n"
    )
    builds, reuses = [], []
    for _ in range(rounds):
        out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
        build, reuse = map(float, out.stdout.split()[-2:])
        builds.append(build)
        reuses.append(reuse)
    print("== ONNX registry: built for every export vs once per process")
    print(
        f"saving per extra model or retried sample: {statistics.median(builds):.2f} s "
        f"(rebuild, min {min(builds):.2f}, max {max(builds):.2f}) vs "
        f"{statistics.median(reuses) * 1e6:.0f} us (reuse)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-llama", action="store_true")
    parser.add_argument("--only", default="run,cache,base,registry")
    parser.add_argument("--examples", default="mlp,text,llama")
    parser.add_argument("--pin", help="processors for parts 1 and 2 (taskset -c), e.g. 0")
    args = parser.parse_args()
    if args.pin:
        PIN[:] = ["taskset", "-c", args.pin]
    names = [n for n in args.examples.split(",") if not (args.no_llama and n == "llama")]
    parts = set(args.only.split(","))
    pinned = f", runs pinned to processor(s) {args.pin}" if args.pin else ""
    print(f"{os.cpu_count()} cores; medians of per-pair ratios over {args.rounds} rounds{pinned}")
    with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
        if "run" in parts:
            bench_run_vs_bare(names, args.rounds, Path(tmp) / "a")
        if "cache" in parts:
            bench_cache(names, args.rounds, Path(tmp) / "b")
        if "base" in parts:
            bench_base_and_head(names, args.rounds, Path(tmp) / "c")
        if "registry" in parts:
            bench_registry(args.rounds)


if __name__ == "__main__":
    main()
