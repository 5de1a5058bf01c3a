"""baseline: base — the same scripts run on the PR's base commit in a git worktree."""

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from observer_ci.core.results import RunResults
from observer_ci.report.escape import escape_text
from tests.support import REPO_ROOT

REPO = REPO_ROOT

MODEL_V1 = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 8))

    def forward(self, x):
        return self.layers(x)
"""

MODEL_V2 = MODEL_V1.replace(
    "torch.nn.Sequential(torch.nn.Linear(8, 8))",
    "torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(8, 8), torch.nn.ReLU())])",
)

SCRIPT = """
import torch
import observer_ci
from model_def import Net

torch.manual_seed(0)
model = Net().eval()
with torch.no_grad(), observer_ci.observe(model, name="net"):
    for batch in (2, 3, 4):
        model(torch.randn(batch, 8))
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def pr_repo(tmp_path_factory) -> tuple[Path, str]:
    return make_pr_repo(tmp_path_factory.mktemp("repo"))


def make_pr_repo(repo: Path) -> tuple[Path, str]:
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.invalid")
    git(repo, "config", "user.name", "ci")
    (repo / "observe").mkdir()
    (repo / "observe" / "model_def.py").write_text(textwrap.dedent(MODEL_V1))
    (repo / "observe" / "net.py").write_text(textwrap.dedent(SCRIPT))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base_sha = git(repo, "rev-parse", "HEAD")
    (repo / "observe" / "model_def.py").write_text(textwrap.dedent(MODEL_V2))
    git(repo, "commit", "-qam", "head: six times more layers")
    return repo, base_sha


def test_base_commit_runs_in_a_worktree_and_node_growth_fails_the_build(pr_repo, tmp_path):
    repo, base_sha = pr_repo
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 3, "base": {"sha": base_sha}}}))
    out = tmp_path / "out"
    env = {
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "PYTHONPATH": str(REPO),  # the children run the observer-ci under test
        "HOME": str(tmp_path),
        "INPUT_CACHE_DIR": ".observer-ci-cache",
        "INPUT_SCRIPT": "observe/net.py",
        "INPUT_BASELINE": "base",
        "INPUT_FAIL_ON": "default,node_count_growth",
        "INPUT_OUT": str(out),
        "INPUT_REPEAT": "2",
        "INPUT_DRY_RUN": "true",
        "GITHUB_WORKSPACE": str(repo),
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "entrypoint.py")],
        cwd=repo,
        env={**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    head = RunResults.read(out / "results.json")
    base = RunResults.read(out / "base-results.json")
    assert base.label == "base" and head.label == ""  # the user gave no label
    head_nodes = head.by_name()["net"].export.node_count
    base_nodes = base.by_name()["net"].export.node_count
    assert head_nodes > 2 * base_nodes
    # base and head shared the cache (two models, two entries) and were timed interleaved
    entries = [p for p in (repo / ".observer-ci-cache").glob("*/*") if p.is_dir()]
    assert len(entries) == 2
    paired = head.by_name()["net"].paired_latency
    assert paired is not None and paired.ratio is not None, paired
    assert paired.ratio > 0 and paired.calls == 3 and paired.rounds == 2
    assert "::error title=observer-ci%3A net%3A node_count_growth" in proc.stdout
    report = (out / "report.md").read_text()
    head_sha = r"\[?`[0-9a-f]{7}`(?:\]\([^)\s]+\))?"  # a link to the commit with a run URL
    assert re.search(rf"(Head {head_sha} vs|Compared with) base", report), report[:400]
    assert escape_text("node_count_growth") in report
    # the summary shows the interleaved ratio (no †: paired), the details its spread
    assert re.search(rf" ×{re.escape(f'{paired.ratio:.2g}')} \| ", report), report[:1200]
    spread = f"×{paired.ratio:.3g} (×{paired.ratio_low:.3g}–{paired.ratio_high:.3g})"
    assert f"head/base {spread}" in report, report
    assert "**Paired ORT timing (base and head interleaved):** head/base" in report
    assert "status<<" in (tmp_path / "output.txt").read_text()
    assert "failure" in (tmp_path / "output.txt").read_text()
    # the worktree is cleaned up, the head checkout untouched
    assert git(repo, "worktree", "list").count("\n") == 0
    changed = [line for line in git(repo, "status", "--porcelain").splitlines()]
    assert [line for line in changed if not line.startswith("??")] == []  # tracked files intact


# pull-request code in `install`: a post-checkout hook sleeping 60 s, a core.fsmonitor program,
# a smudge filter on every file; the action's `git worktree add` must run none of them
PLANT = (
    'printf "#!/bin/sh\\necho hook >> $MARKS/ran\\nsleep 60\\n" > .git/hooks/post-checkout'
    " && chmod +x .git/hooks/post-checkout"
    ' && printf "#!/bin/sh\\necho fsmonitor >> $MARKS/ran\\nexit 1\\n" > $MARKS/fsmonitor'
    " && chmod +x $MARKS/fsmonitor && git config core.fsmonitor $MARKS/fsmonitor"
    " && git config filter.evil.smudge \"sh -c 'echo smudge >> $MARKS/ran; cat'\""
    ' && echo "* filter=evil" > .git/info/attributes'
)


def test_hooks_and_config_planted_by_install_never_run_in_the_base_checkout(tmp_path):
    (tmp_path / "repo").mkdir()
    repo, base_sha = make_pr_repo(tmp_path / "repo")
    marks = tmp_path / "marks"
    marks.mkdir()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 3, "base": {"sha": base_sha}}}))
    out = tmp_path / "out"
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin:/usr/local/bin",
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path),
        "MARKS": str(marks),
        "INPUT_INSTALL": PLANT,
        "INPUT_SCRIPT": "observe/net.py",
        "INPUT_BASELINE": "base",
        "INPUT_TIMEOUT_MINUTES": "0.5",
        "INPUT_OUT": str(out),
        "INPUT_REPEAT": "1",
        "INPUT_DRY_RUN": "true",
        "GITHUB_WORKSPACE": str(repo),
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
    }
    begin = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(REPO / "entrypoint.py")],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.monotonic() - begin
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert (repo / ".git" / "hooks" / "post-checkout").is_file()  # install did plant them
    assert "core.fsmonitor" in git(repo, "config", "--list")
    assert not (marks / "ran").exists(), (marks / "ran").read_text()
    base = RunResults.read(out / "base-results.json")  # the base commit did run, unfiltered
    assert [m.name for m in base.models] == ["net"], base.models
    assert "could not be checked out" not in proc.stdout
    assert elapsed < 120, elapsed
