"""What ``baseline: history`` costs against ``baseline: base``: the action (``entrypoint.py``,
run mode, on a pull request) timed side by side, alternating, on shipped examples.

``base`` checks out the base commit in a worktree and runs the scripts there too (side by
side on two cores, then the paired timing); ``history`` runs the head alone and downloads
``--history-runs`` earlier runs' artifacts from a loopback fake GitHub (the REST calls the
action makes: runs list, artifact lists, zip downloads). Prints each run's wall time and
the ratio of the medians (target <= 0.6). Run:
    python benchmarks/bench_history_cost.py [--examples mlp_classifier small_cnn] [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from observer_ci.core.results import RunResults  # noqa: E402
from tests.support.fake_github import FakeGitHub  # noqa: E402

TOKEN = "bench-token"
OWNER, NAME = "octo", "models"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def make_repo(root: Path, examples: list[str]) -> tuple[Path, str, str]:
    """A repository with the examples (base commit) and a head commit touching a comment."""
    repo = root / "repo"
    (repo / "observe").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "bench@example.invalid")
    git(repo, "config", "user.name", "bench")
    for name in examples:
        shutil.copy(REPO / "examples" / f"{name}.py", repo / "observe" / f"{name}.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    with open(repo / "observe" / f"{examples[0]}.py", "a", encoding="utf-8") as f:
        f.write("\n# head\n")
    git(repo, "commit", "-qam", "head")
    return repo, base, git(repo, "rev-parse", "HEAD")


def action(
    repo: Path,
    tmp: Path,
    gh: FakeGitHub,
    base: str,
    head: str,
    baseline: str,
    cache: Path | None = None,
) -> tuple[float, float]:
    """One run of the action; its wall time and CPU time (every process) in seconds."""
    tmp.mkdir(parents=True)
    event = {
        "pull_request": {"number": 1, "head": {"sha": head}, "base": {"sha": base}},
        "repository": {"default_branch": "main"},
    }
    (tmp / "event.json").write_text(json.dumps(event), encoding="utf-8")
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "HOME": str(tmp),
        "PYTHONPATH": str(REPO),
        "GITHUB_API_URL": gh.url,
        "GITHUB_REPOSITORY": f"{OWNER}/{NAME}",
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(tmp / "event.json"),
        "GITHUB_WORKSPACE": str(repo),
        "GITHUB_OUTPUT": str(tmp / "output.txt"),
        "INPUT_SCRIPT": "observe/*.py",
        "INPUT_BASELINE": baseline,
        "INPUT_TOKEN": TOKEN,
        "INPUT_OUT": str(tmp / "out"),
        "INPUT_CACHE_DIR": str(cache) if cache else "",
    }
    begin, cpu = time.perf_counter(), _children_cpu()
    subprocess.run(
        [sys.executable, str(REPO / "entrypoint.py")], cwd=repo, env=env, capture_output=True
    )
    seconds, cpu = time.perf_counter() - begin, _children_cpu() - cpu
    if not (tmp / "out" / "results.json").is_file():
        raise SystemExit(f"{baseline}: no results.json written under {tmp}")
    return seconds, cpu


def _children_cpu() -> float:
    """User + system seconds of every finished descendant (they are all waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def seed_history(gh: FakeGitHub, results: RunResults, base: str, runs: int) -> None:
    """``runs`` default-branch push runs, each with its history artifact (the base's last)."""
    for k in range(runs):
        sha = base if k == runs - 1 else f"{k + 1:040x}"
        gh.add_run(OWNER, NAME, 1000 + k, head_sha=sha, event="push", head_branch="main")
        entry = dataclasses.replace(results, created_at=f"2026-01-{k + 1:02d}T00:00:00+00:00")
        data = json.dumps(entry.to_dict()).encode()
        gh.more.add_artifact(OWNER, NAME, 1000 + k, "observer-ci-history", {"results.json": data})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", nargs="+", default=["mlp_classifier", "small_cnn"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--history-runs", type=int, default=20)
    parser.add_argument(
        "--cache",
        action="store_true",
        help="both modes share an export cache the warm-up run filled (every export a hit); "
        "default: the action's default, no cache (every export cold in both modes)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeGitHub(token=TOKEN) as gh:
        root = Path(tmp)
        repo, base, head = make_repo(root, args.examples)
        times: dict[str, list[tuple[float, float]]] = {"base": [], "history": []}
        cache = root / "export-cache" if args.cache else None
        # a first base run gives the results the history is made of (and warms the disk
        # cache; with --cache, it fills the export cache with base's and head's graphs)
        action(repo, root / "warm", gh, base, head, "base", cache)
        warm = RunResults.read(root / "warm" / "out" / "results.json")
        seed_history(gh, warm, base, args.history_runs)
        for k in range(args.rounds):
            for baseline in ("base", "history") if k % 2 == 0 else ("history", "base"):
                seconds, cpu = action(
                    repo, root / f"{baseline}-{k}", gh, base, head, baseline, cache
                )
                times[baseline].append((seconds, cpu))
                print(f"round {k}: baseline {baseline:<7} {seconds:6.1f} s wall, {cpu:6.1f} s CPU")
        wall = {b: statistics.median(t[0] for t in times[b]) for b in times}
        cpu = {b: statistics.median(t[1] for t in times[b]) for b in times}
        print(
            f"examples {' '.join(args.examples)} on {os.cpu_count()} cores, "
            f"export cache {'hit' if args.cache else 'none'}, load "
            f"{os.getloadavg()[0]:.1f}: baseline base {wall['base']:.1f} s wall "
            f"({cpu['base']:.1f} s CPU), baseline history ({args.history_runs} runs fetched) "
            f"{wall['history']:.1f} s wall ({cpu['history']:.1f} s CPU); history/base "
            f"wall x{wall['history'] / wall['base']:.2f} (target <= 0.6), "
            f"CPU x{cpu['history'] / cpu['base']:.2f}"
        )


if __name__ == "__main__":
    main()
