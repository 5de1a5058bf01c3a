"""History, check runs and the accept path end to end: ``observer_ci.action.main.main`` with
``INPUT_*``/``GITHUB_*`` variables against the loopback fake GitHub, real child runs.

- ``push_run``: a push to ``main`` records its results (``history_path``) and gets a
  ``success`` check run; the test then makes it available as the run's artifact (what the
  composite's ``actions/upload-artifact`` step does), beside two older entries.
- ``pr_run``: ``baseline: history`` on a pull request whose base commit has no run: the nearest
  ancestor's runs are downloaded (not the newer run main got since), the trend is drawn, a node
  count growth fails; its check run is created ``in_progress`` then completed ``failure``.
- accept: a comment from a user with read permission is refused; the same command from a
  maintainer (``issue_comment`` event, nothing run) turns a new check run ``neutral``, and the
  comment names who accepted what; the label on another pull request does so in run mode.
- publish mode applies the same acceptances (a reader refused, a maintainer neutral);
  ``history+base`` fetches the history and re-runs the base in one job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from observer_ci.action import main as action
from observer_ci.action.artifact import Payload, write_payload
from observer_ci.core.results import RunResults
from observer_ci.report.accepted import ACCEPTED_TITLE
from observer_ci.report.escape import escape_text
from observer_ci.report.rules import DEFAULT_FAIL_ON
from tests.support import REPO_ROOT
from tests.support.fake_github import FakeGitHub
from tests.support.logging_state import package_logger_kept

TOKEN = "ghs_historyChecksToken0123456789"
OWNER, REPO = "octo", "models"
MAINTAINER, READER = "maint", "bob"
C1, C2, C3, C4, C9 = (c * 40 for c in "12349")  # main: c1 <- c2 <- c3 <- c4 (base), c9 newer
HEAD_PR, HEAD_LABEL = "a" * 40, "b" * 40
PR, LABEL_PR = 5, 6
FAIL_ON = "default,node_count_growth"

MODEL = """
import torch
import observer_ci

class Net(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.Sequential(
            *[m for _ in range(n) for m in (torch.nn.Linear(8, 8), torch.nn.ReLU())]
        )

    def forward(self, x):
        return self.layers(x)

torch.manual_seed(0)
model = Net(LAYERS).eval()
with torch.no_grad(), observer_ci.observe(model, name="net"):
    for batch in (2, 3):
        model(torch.randn(batch, 8))
"""


@dataclass
class Ran:
    code: int
    stdout: str
    outputs: dict[str, str]
    out: Path


@pytest.fixture(scope="module")
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        server.more.set_permission(OWNER, REPO, MAINTAINER, "write")
        server.more.set_permission(OWNER, REPO, READER, "read")
        chain = [(C1, []), (C2, [C1]), (C3, [C2]), (C4, [C3]), (C9, [C4])]
        server.more.add_commits(OWNER, REPO, chain)
        yield server


def workspace(root: Path, layers: int) -> Path:
    (root / "observe").mkdir(parents=True, exist_ok=True)
    script = textwrap.dedent(MODEL).replace("LAYERS", str(layers))
    (root / "observe" / "net.py").write_text(script, encoding="utf-8")
    return root


def act(tmp: Path, gh: FakeGitHub, event_name: str, event: dict, **inputs: str) -> Ran:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "event.json").write_text(json.dumps(event), encoding="utf-8")
    output = tmp / "output.txt"
    output.write_text("", encoding="utf-8")
    out = tmp / "out"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO_ROOT),
        "OMP_NUM_THREADS": "1",
        "GITHUB_ACTIONS": "true",
        "GITHUB_API_URL": gh.url,
        "GITHUB_REPOSITORY": f"{OWNER}/{REPO}",
        "GITHUB_RUN_ID": "777",
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_EVENT_PATH": str(tmp / "event.json"),
        "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
        "GITHUB_OUTPUT": str(output),
        "INPUT_SCRIPT": "observe/net.py",
        "INPUT_TOKEN": TOKEN,
        "INPUT_OUT": str(out),
        "INPUT_REPEAT": "2",
        "INPUT_FAIL_ON": FAIL_ON,
        **inputs,
    }
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), package_logger_kept():
        code = action.main(env)
    return Ran(code, stdout.getvalue(), read_outputs(output), out)


def read_outputs(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    outputs, i = {}, 0
    while i < len(lines):
        key, _, delimiter = lines[i].partition("<<")
        end = lines.index(delimiter, i + 1)
        outputs[key] = "\n".join(lines[i + 1 : end])
        i = end + 1
    return outputs


def pr_event(number: int, head: str) -> dict:
    return {
        "pull_request": {"number": number, "head": {"sha": head}, "base": {"sha": C4}},
        "repository": {"default_branch": "main"},
    }


def checks_on(gh: FakeGitHub, sha: str) -> list[dict]:
    return [c for c in gh.more.checks(OWNER, REPO) if c["head_sha"] == sha]


def older(results: RunResults, created_at: str, commit: str) -> bytes:
    """An earlier entry of the history: the same models, recorded earlier on ``commit``."""
    entry = dataclasses.replace(results, created_at=created_at, commit=commit)
    return json.dumps(entry.to_dict()).encode()


@pytest.fixture(scope="module")
def push_run(tmp_path_factory, gh) -> Ran:
    tmp = tmp_path_factory.mktemp("push")
    ws = workspace(tmp / "ws", layers=1)
    event = {"ref": "refs/heads/main", "after": C3, "repository": {"default_branch": "main"}}
    ran = act(
        tmp,
        gh,
        "push",
        event,
        GITHUB_WORKSPACE=str(ws),
        GITHUB_SHA=C3,
        GITHUB_REF="refs/heads/main",
    )
    recorded = RunResults.read(Path(ran.outputs["history_path"]) / "results.json")
    # what upload-artifact makes of it, beside two older runs and one main got later
    for run_id, sha, stamp in ((101, C1, "2020-01-01"), (102, C2, "2020-01-02")):
        gh.add_run(OWNER, REPO, run_id, head_sha=sha, event="push", head_branch="main")
        data = older(recorded, f"{stamp}T00:00:00+00:00", sha)
        gh.more.add_artifact(OWNER, REPO, run_id, "observer-ci-history", {"results.json": data})
    gh.add_run(OWNER, REPO, 103, head_sha=C3, event="push", head_branch="main")
    history = (Path(ran.outputs["history_path"]) / "results.json").read_bytes()
    gh.more.add_artifact(OWNER, REPO, 103, "observer-ci-history", {"results.json": history})
    gh.add_run(OWNER, REPO, 109, head_sha=C9, event="push", head_branch="main")
    later = older(recorded, "2999-01-01T00:00:00+00:00", C9)
    gh.more.add_artifact(OWNER, REPO, 109, "observer-ci-history", {"results.json": later})
    gh.add_run(OWNER, REPO, 110, head_sha=HEAD_PR, event="pull_request", head_branch="main")
    gh.more.add_artifact(OWNER, REPO, 110, "observer-ci-history", {"results.json": later})
    return ran


@pytest.fixture(scope="module")
def pr_run(tmp_path_factory, gh, push_run) -> Ran:
    tmp = tmp_path_factory.mktemp("pr")
    ws = workspace(tmp / "ws", layers=4)
    gh.add_pull(OWNER, REPO, PR, head_sha=HEAD_PR, head_repository=f"{OWNER}/{REPO}")
    since = len(gh.requests)
    ran = act(
        tmp,
        gh,
        "pull_request",
        pr_event(PR, HEAD_PR),
        GITHUB_WORKSPACE=str(ws),
        INPUT_BASELINE="history",
    )
    ran.requests = gh.requests[since:]  # type: ignore[attr-defined]
    return ran


def test_a_push_to_main_records_its_results_and_gets_a_success_check(push_run, gh):
    assert push_run.code == 0, push_run.stdout
    recorded = RunResults.read(Path(push_run.outputs["history_path"]) / "results.json")
    assert recorded.commit == C3 and recorded.by_name()["net"].export.node_count
    assert recorded.created_at
    (check,) = checks_on(gh, C3)
    assert check["status"] == "completed" and check["conclusion"] == "success"
    assert check["name"] == "observer-ci" and "net" in check["output"]["summary"]


def test_a_pull_request_reads_the_history_of_its_base_or_nearest_ancestor(pr_run, gh):
    assert pr_run.code == 1, pr_run.stdout  # node_count_growth against the history's newest
    paths = [f"{r.method} {r.path}" for r in pr_run.requests]
    runs = [r for r in pr_run.requests if r.path.endswith("/actions/runs")]
    assert runs and runs[0].query["branch"] == "main" and runs[0].query["event"] == "push"
    downloaded = {p.split("/")[-2] for p in paths if p.endswith("/zip")}
    ids = {a["id"]: run for (_, _, run), items in gh.more.artifacts.items() for a in items}
    assert sorted(ids[int(i)] for i in downloaded) == [101, 102, 103]  # not 109, not 110
    assert all(auth is None for auth in gh.more.blob_auth)  # the token stays on the API
    report = (pr_run.out / "report.md").read_text(encoding="utf-8")
    assert "### Trend" in report and "xychart-beta" in report
    assert escape_text("node_count_growth") in report
    head = RunResults.read(pr_run.out / "results.json")
    notes = " ".join(head.environment.get("notes", []))
    assert "nearest ancestor" in notes and C3[:12] in notes


def test_the_check_run_is_created_then_completed_with_annotations(pr_run, gh):
    (check,) = checks_on(gh, HEAD_PR)
    assert check["updates"] >= 1  # created in_progress, then PATCHed
    assert check["status"] == "completed" and check["conclusion"] == "failure"
    assert "regression" in check["output"]["title"]
    assert len(check["output"]["summary"]) <= 65535
    (note,) = [a for a in check["annotations"] if "node_count_growth" in a["title"]]
    assert note["path"] == "observe/net.py" and note["annotation_level"] == "failure"
    assert pr_run.outputs["check_run_url"] == check["html_url"]


def comment_event(number: int) -> dict:
    return {
        "action": "created",
        "issue": {"number": number, "pull_request": {"url": "x"}},
        "comment": {"body": "/observer-ci accept"},
        "repository": {"default_branch": "main"},
    }


def sticky(gh: FakeGitHub, number: int) -> dict:
    (ours,) = [c for c in gh.comments(OWNER, REPO, number) if c["user"]["type"] == "Bot"]
    return ours


def test_accept_from_a_user_without_write_permission_is_refused(pr_run, gh, tmp_path):
    gh.seed_comments(
        OWNER, REPO, PR, 1, lambda i: "/observer-ci accept node_count_growth net", login=READER
    )
    ran = act(tmp_path, gh, "issue_comment", comment_event(PR), GITHUB_WORKSPACE=str(tmp_path))
    assert ran.code == 0, ran.stdout
    assert checks_on(gh, HEAD_PR)[-1]["conclusion"] == "failure"
    body = sticky(gh, PR)["body"]
    assert "refused" in body and READER in body and "read permission" in body
    assert "Accepted regressions" in body and "accepted by" not in body


def test_accept_by_a_maintainers_comment_turns_the_check_neutral(pr_run, gh, tmp_path):
    gh.seed_comments(
        OWNER, REPO, PR, 1, lambda i: "/observer-ci accept node_count_growth net", login=MAINTAINER
    )
    before = len(checks_on(gh, HEAD_PR))
    ran = act(tmp_path, gh, "issue_comment", comment_event(PR), GITHUB_WORKSPACE=str(tmp_path))
    assert ran.code == 0, ran.stdout
    checks = checks_on(gh, HEAD_PR)
    assert len(checks) == before + 1 and checks[-1]["conclusion"] == "neutral"
    body = sticky(gh, PR)["body"]
    assert escape_text(f"accepted by @{MAINTAINER} (comment, ") in body
    assert escape_text("node_count_growth on net") in body
    assert body.count("observer-ci:accept-section") == 1  # rewritten, not appended


def test_accept_by_label_in_the_next_run(push_run, gh, tmp_path):
    gh.add_pull(OWNER, REPO, LABEL_PR, head_sha=HEAD_LABEL, head_repository=f"{OWNER}/{REPO}")
    gh.more.add_label(OWNER, REPO, LABEL_PR, "observer-ci:accept", actor=MAINTAINER)
    event = {**pr_event(LABEL_PR, HEAD_LABEL), "action": "labeled"}
    ws = workspace(tmp_path / "ws", layers=4)
    ran = act(
        tmp_path, gh, "pull_request", event, GITHUB_WORKSPACE=str(ws), INPUT_BASELINE="history"
    )
    assert ran.code == 0, ran.stdout  # accepted: reported, not failing
    (check,) = checks_on(gh, HEAD_LABEL)
    assert check["conclusion"] == "neutral"
    assert [a["annotation_level"] for a in check["annotations"]].count("notice") >= 1
    body = sticky(gh, LABEL_PR)["body"]
    who = escape_text(f"accepted by @{MAINTAINER} (label, ")
    assert who in body
    # report.md and the job summary carry the same section (one renderer), not the ledger
    report = Path(ran.outputs["report_path"]).read_text(encoding="utf-8")
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    for text in (report, summary):
        assert f"{ACCEPTED_TITLE}\n\n- " in text and who in text
        assert escape_text("node_count_growth on net") in text
        assert "observer-ci:accepted " not in text  # the hidden ledger stays in the comment


def test_publish_mode_writes_the_check_run_completed_at_once(push_run, gh, tmp_path):
    """The job after a fork's pull request: the payload's head commit gets the check run."""
    head_sha, run_id, number = "f" * 40, 4321, 9
    recorded = RunResults.read(Path(push_run.outputs["history_path"]) / "results.json")
    broken = dataclasses.replace(recorded.by_name()["net"], status="export_failed", error="boom")
    head = dataclasses.replace(recorded, models=[broken], label="head")
    payload = Payload(number, head_sha, str(run_id), fail_on=frozenset(DEFAULT_FAIL_ON))
    write_payload(tmp_path / "payload", payload, head, None)
    gh.add_run(OWNER, REPO, run_id, head_sha=head_sha, pull_requests=(number,))
    event = {"action": "completed", "workflow_run": {"id": run_id}}
    ran = act(
        tmp_path,
        gh,
        "workflow_run",
        event,
        INPUT_MODE="publish",
        INPUT_PAYLOAD_DIR=str(tmp_path / "payload"),
        GITHUB_WORKSPACE=str(tmp_path),
    )
    assert ran.code == 0 and ran.outputs["comment_status"] == "created", ran.stdout
    (check,) = checks_on(gh, head_sha)
    assert check["status"] == "completed" and check["conclusion"] == "failure"
    assert check["updates"] == 0  # created completed, in one request
    assert [a["title"] for a in check["annotations"]] == ["export_failed: net"]


def publish_job(tmp: Path, gh: FakeGitHub, payload_dir: Path, run_id: int) -> Ran:
    event = {"action": "completed", "workflow_run": {"id": run_id}}
    return act(
        tmp,
        gh,
        "workflow_run",
        event,
        INPUT_MODE="publish",
        INPUT_PAYLOAD_DIR=str(payload_dir),
        GITHUB_WORKSPACE=str(tmp),
    )


def test_publish_mode_applies_a_maintainers_accept_and_refuses_a_reader(push_run, gh, tmp_path):
    """A fork's pull request: its node count grew; a reader's accept is refused (the check
    stays ``failure``), the same command from a maintainer turns the next publish ``neutral``."""
    head_sha, run_id, number = "e" * 40, 4322, 11
    base = RunResults.read(Path(push_run.outputs["history_path"]) / "results.json")
    net = base.by_name()["net"]
    assert net.export is not None and net.export.node_count
    export = dataclasses.replace(net.export, node_count=net.export.node_count * 3)
    head = dataclasses.replace(base, models=[dataclasses.replace(net, export=export)])
    fail_on = frozenset({*DEFAULT_FAIL_ON, "node_count_growth"})
    payload = Payload(number, head_sha, str(run_id), fail_on=fail_on)
    write_payload(tmp_path / "payload", payload, head, base)
    gh.add_run(OWNER, REPO, run_id, head_sha=head_sha, pull_requests=(number,))
    command = "/observer-ci accept node_count_growth net"

    gh.seed_comments(OWNER, REPO, number, 1, lambda i: command, login=READER)
    refused = publish_job(tmp_path / "first", gh, tmp_path / "payload", run_id)
    assert refused.code == 0 and refused.outputs["status"] == "failure", refused.stdout
    assert checks_on(gh, head_sha)[-1]["conclusion"] == "failure"
    body = sticky(gh, number)["body"]
    assert "refused" in body and READER in body and "read permission" in body
    assert "accepted by" not in body

    gh.seed_comments(OWNER, REPO, number, 1, lambda i: command, login=MAINTAINER)
    accepted = publish_job(tmp_path / "second", gh, tmp_path / "payload", run_id)
    assert accepted.code == 0 and accepted.outputs["comment_status"] == "updated"
    assert accepted.outputs["status"] == "success" and accepted.outputs["regressions"] == "0"
    checks = checks_on(gh, head_sha)
    assert [c["conclusion"] for c in checks] == ["failure", "neutral"]
    assert [a["annotation_level"] for a in checks[-1]["annotations"]] == ["notice"]
    body = sticky(gh, number)["body"]
    assert escape_text(f"accepted by @{MAINTAINER} (comment, ") in body
    assert escape_text("node_count_growth on net") in body
    assert body.count("observer-ci:accept-section") == 1


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def test_history_plus_base_fetches_the_history_and_reruns_the_base(push_run, gh, tmp_path):
    """``baseline: history+base``: main's history downloaded (band, trend) and the base commit
    re-run in the same job; node count is judged against the base re-run (2 layers), not
    main's history (1 layer), and latency by the paired timing (README, History)."""
    repo = workspace(tmp_path / "repo", layers=2)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.email=ci@example.invalid", "-c", "user.name=ci", "add", "-A")
    git(repo, "-c", "user.email=ci@example.invalid", "-c", "user.name=ci", "commit", "-qm", "b")
    base_sha = git(repo, "rev-parse", "HEAD")
    workspace(repo, layers=4)
    git(repo, "-c", "user.email=ci@example.invalid", "-c", "user.name=ci", "commit", "-qam", "h")
    head_sha = git(repo, "rev-parse", "HEAD")
    gh.more.add_commits(OWNER, REPO, [(base_sha, [C3])])  # main's run nearest to it: C3
    number = 12
    gh.add_pull(OWNER, REPO, number, head_sha=head_sha, head_repository=f"{OWNER}/{REPO}")
    event = pr_event(number, head_sha)
    event["pull_request"]["base"]["sha"] = base_sha
    since = len(gh.requests)
    ran = act(
        tmp_path / "job",
        gh,
        "pull_request",
        event,
        GITHUB_WORKSPACE=str(repo),
        INPUT_BASELINE="history+base",
    )
    assert ran.code == 1, ran.stdout  # node_count_growth, 4 layers against 2
    zips = [r.path.split("/")[-2] for r in gh.requests[since:] if r.path.endswith("/zip")]
    assert len(zips) == 3  # the history of C3, C2, C1
    base = RunResults.read(ran.out / "base" / "results.json")
    head = RunResults.read(ran.out / "results.json")
    main_nodes = RunResults.read(Path(push_run.outputs["history_path"]) / "results.json")
    nodes = {
        "main": main_nodes.by_name()["net"].export.node_count,
        "base": base.by_name()["net"].export.node_count,
        "head": head.by_name()["net"].export.node_count,
    }
    assert nodes["main"] < nodes["base"] < nodes["head"], nodes
    assert head.by_name()["net"].paired_latency is not None  # the pair ran: latency from it
    report = (ran.out / "report.md").read_text(encoding="utf-8")
    assert "### Trend" in report  # drawn from the history
    assert "percentile band" not in report  # the band is not what judged latency
    (row,) = [
        line
        for line in report.splitlines()
        if "| node_count_growth |" in line.replace("&#95;", "_")
    ]
    assert f"| {nodes['base']} |" in row and f"| {nodes['main']} |" not in row, row
