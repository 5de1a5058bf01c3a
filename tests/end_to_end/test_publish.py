"""Publish mode end to end: ``entrypoint.py`` in a subprocess against the local fake GitHub.

- two-step fork mode: a run-mode job (no write token) leaves the payload, a
  ``workflow_run`` job publishes it once the API confirms the pull request is the run's;
- hostile payloads (oversized, wrong pull request, malformed, wrong types, path tricks,
  forged report.md) are rejected or re-rendered escaped, and nothing else is posted;
- matrix legs merged into one comment (a red leg keeps the comment red);
- comment keys keep separate sticky comments on one pull request.

Only the run-mode job exports nothing (its script fails at once): the payloads of the
other tests are written with the same writer run mode uses, from results built here.
The fork and matrix publishing run ``entrypoint.py`` as a subprocess; the other cases call
the same ``observer_ci.action.main.main`` in this process (a subprocess costs ~1 s each).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from observer_ci.action import main as action
from observer_ci.action.artifact import MAX_RESULTS_BYTES, PAYLOAD_FILE, Payload, write_payload
from observer_ci.core.results import (
    STATUS_EXPORT_FAILED,
    STATUS_OK,
    ExportResult,
    ModelResult,
    ObservationResult,
    RunResults,
)
from observer_ci.github.sticky import MARKER, parse_marker
from observer_ci.report.escape import ZWJ
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds
from tests.support import REPO_ROOT
from tests.support.fake_github import FakeGitHub
from tests.support.logging_state import package_logger_kept

ENTRYPOINT = REPO_ROOT / "entrypoint.py"
TOKEN = "ghs_publishSecretToken0123456789abcdef"
OWNER, REPO = "octo", "models"
FORK = "forker/models"
SHA = "a" * 40
OTHER_SHA = "b" * 40
HOSTILE_NAME = "<img src=x onerror=alert(1)> @octocat ::warning::owned"


@dataclass
class Published:
    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str]
    out: Path

    @property
    def log(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@pytest.fixture(scope="module")
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        yield server


# -- building payloads -------------------------------------------------------------------


def model(name: str, status: str = STATUS_OK, error: str | None = None) -> ModelResult:
    ok = status == STATUS_OK
    return ModelResult(
        name=name,
        script=f"observe/{name}.py",
        status=status,
        error=error,
        n_observations=2,
        export=ExportResult(ok=ok, error=None if ok else error, node_count=12 if ok else None),
        observations=[
            ObservationResult(index=i, ok=True, success=True, abs=1e-7, rel=1e-6)
            for i in range(2 if ok else 0)
        ],
    )


def results(*models: ModelResult) -> RunResults:
    return RunResults(models=list(models), environment={"torch": "2.13.0+cpu"}, label="head")


def payload(pr: int = 21, run_id: str = "901", **fields) -> Payload:
    return Payload(
        pr_number=pr,
        head_sha=fields.pop("head_sha", SHA),
        run_id=run_id,
        thresholds=Thresholds(),
        fail_on=frozenset(DEFAULT_FAIL_ON),
        **fields,
    )


def leave(directory: Path, head: RunResults, base: RunResults | None = None, **fields) -> Path:
    return write_payload(directory, payload(**fields), head, base)


def publish(
    tmp: Path,
    gh: FakeGitHub,
    payload_dir: Path,
    *,
    workflow_run_id: int | None = 901,
    pr_event: int | None = None,
    subprocess_run: bool = False,
    **inputs: str,
) -> Published:
    """The action in publish mode, after a ``workflow_run`` event (or a pull_request event
    when ``pr_event`` is given: the job after a matrix in the same workflow)."""
    tmp.mkdir(parents=True, exist_ok=True)
    event = tmp / "event.json"
    if pr_event is not None:
        data = {"pull_request": {"number": pr_event, "head": {"sha": SHA}, "base": {"sha": "0"}}}
    else:
        data = {"action": "completed", "workflow_run": {"id": workflow_run_id}}
    event.write_text(json.dumps(data), encoding="utf-8")
    output_file = tmp / "github_output.txt"
    output_file.write_text("", encoding="utf-8")
    out = tmp / "out"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO_ROOT),
        "GITHUB_ACTIONS": "true",
        "GITHUB_API_URL": gh.url,
        "GITHUB_REPOSITORY": f"{OWNER}/{REPO}",
        "GITHUB_RUN_ID": "555",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
        "GITHUB_OUTPUT": str(output_file),
        "INPUT_MODE": "publish",
        "INPUT_TOKEN": TOKEN,
        "INPUT_OUT": str(out),
        "INPUT_PAYLOAD_DIR": str(payload_dir),
        **inputs,
    }
    if not subprocess_run:
        stdout, stderr = io.StringIO(), io.StringIO()
        with (
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            package_logger_kept(),
        ):
            code = action.main(env)
        return Published(code, stdout.getvalue(), stderr.getvalue(), read_outputs(output_file), out)
    proc = subprocess.run(
        [sys.executable, str(ENTRYPOINT)],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    return Published(proc.returncode, proc.stdout, proc.stderr, read_outputs(output_file), out)


def read_outputs(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    outputs, i = {}, 0
    while i < len(lines):
        key, _, delimiter = lines[i].partition("<<")
        end = lines.index(delimiter, i + 1)
        outputs[key] = "\n".join(lines[i + 1 : end])
        i = end + 1
    return outputs


def writes(gh: FakeGitHub, since: int) -> list[str]:
    return [
        f"{r.method} {r.path}"
        for r in gh.requests[since:]
        if r.method in ("POST", "PATCH") and "/check-runs" not in r.path  # test_history_checks
    ]


# -- two-step mode for pull requests from forks --------------------------------------------


@pytest.fixture(scope="module")
def fork_payload(tmp_path_factory, gh) -> Path:
    """Run mode as the pull-request job of a fork runs it: no write token, post_comment
    false; its script fails with hostile text, so the payload carries it."""
    tmp = tmp_path_factory.mktemp("fork-pr-job")
    script = tmp / "observe_hostile.py"
    script.write_text(f"raise RuntimeError({HOSTILE_NAME!r})\n", encoding="utf-8")
    event = tmp / "event.json"
    event.write_text(
        json.dumps({"pull_request": {"number": 21, "head": {"sha": SHA}, "base": {"sha": "0"}}}),
        encoding="utf-8",
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO_ROOT),
        "GITHUB_ACTIONS": "true",
        "GITHUB_API_URL": gh.url,
        "GITHUB_REPOSITORY": f"{OWNER}/{REPO}",
        "GITHUB_RUN_ID": "901",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_WORKSPACE": str(tmp),
        "GITHUB_OUTPUT": str(tmp / "github_output.txt"),
        "INPUT_SCRIPT": str(script),
        "INPUT_OUT": str(tmp / "out"),
        "INPUT_POST_COMMENT": "false",
        "INPUT_REPEAT": "1",
        "INPUT_LABEL": "fork-leg",
    }
    proc = subprocess.run(
        [sys.executable, str(ENTRYPOINT)], cwd=tmp, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # script_failed fails the build
    outputs = read_outputs(tmp / "github_output.txt")
    assert outputs["comment_status"] == "disabled" == outputs["comment"]
    payload_dir = Path(outputs["payload_path"])
    assert payload_dir == tmp / "out" / "payload"
    report = (tmp / "out" / "report.md").read_text(encoding="utf-8")
    assert "observer-ci (fork-leg)" in report.splitlines()[1]
    # a forged report.md next to the payload must never reach the comment
    (payload_dir / "report.md").write_text(f"{MARKER}\nFORGED all green", encoding="utf-8")
    return payload_dir


def test_fork_payload_is_published_once_the_api_confirms_the_pull_request(
    tmp_path, gh, fork_payload
):
    gh.add_run(OWNER, REPO, 901, head_sha=SHA, head_repository=FORK)  # forks list no PRs
    gh.add_pull(OWNER, REPO, 21, head_sha=SHA, head_repository=FORK)
    before = len(gh.requests)
    run = publish(tmp_path, gh, fork_payload, subprocess_run=True)
    assert run.returncode == 0, run.log
    assert run.outputs["comment_status"] == "created" == run.outputs["comment"]
    assert run.outputs["status"] == "failure" and run.outputs["regressions"] == "1"
    assert writes(gh, before) == [f"POST /repos/{OWNER}/{REPO}/issues/21/comments"]
    paths = [r.path for r in gh.requests[before:]]
    assert f"/repos/{OWNER}/{REPO}/actions/runs/901" in paths
    assert f"/repos/{OWNER}/{REPO}/pulls/21" in paths
    (body,) = [c["body"] for c in gh.comments(OWNER, REPO, 21)]
    assert parse_marker(body).key == "fork-leg"  # the leg's own sticky comment
    assert "observer-ci (fork-leg)" in body.splitlines()[1]
    assert "FORGED" not in body  # re-rendered from results.json
    assert "script&#95;failed" in body or "script_failed" in body
    assert "&lt;img src=x onerror=alert(1)>" in body and "<img" not in body
    assert "@octocat" not in body and f"@{ZWJ}octocat" in body
    assert "\n::warning" not in run.stdout  # the hostile text issued no workflow command
    assert "actions/runs/901" in body  # the run that produced the results
    assert TOKEN not in run.stdout + run.stderr


def test_a_payload_whose_pull_request_has_moved_on_is_not_posted(tmp_path, gh):
    gh.add_run(OWNER, REPO, 902, head_sha=SHA, head_repository=FORK)
    gh.add_pull(OWNER, REPO, 22, head_sha=OTHER_SHA, head_repository=FORK)
    leave(tmp_path / "payload", results(model("mlp")), pr=22, run_id="902")
    before = len(gh.requests)
    run = publish(tmp_path, gh, tmp_path / "payload", workflow_run_id=902)
    assert run.returncode == 0, run.log
    assert run.outputs["comment_status"] == "stale"
    assert writes(gh, before) == []
    assert (run.out / "report.md").exists()  # written before deciding not to post


def _oversized(directory: Path) -> None:
    leave(directory, results(model("mlp")))
    with open(directory / "results.json", "a", encoding="utf-8") as f:
        f.write(" " * MAX_RESULTS_BYTES)


def _wrong_pr(directory: Path) -> None:
    leave(directory, results(model("mlp")), pr=23)  # PR 23 is another fork's


def _other_run(directory: Path) -> None:
    leave(directory, results(model("mlp")), run_id="777")


def _other_commit(directory: Path) -> None:
    leave(directory, results(model("mlp")), head_sha=OTHER_SHA)


def _malformed(directory: Path) -> None:
    leave(directory, results(model("mlp")))
    (directory / PAYLOAD_FILE).write_text('{"format": "observer-ci-payload", "pr', "utf-8")


def _wrong_types(directory: Path) -> None:
    leave(directory, results(model("mlp")))
    data = json.loads((directory / "results.json").read_text(encoding="utf-8"))
    data["models"][0]["name"] = {"$ne": 1}
    data["models"][0]["observations"][0]["abs"] = "0.0 <script>"
    (directory / "results.json").write_text(json.dumps(data), encoding="utf-8")


def _traversal_key(directory: Path) -> None:
    leave(directory, results(model("mlp")))
    data = json.loads((directory / PAYLOAD_FILE).read_text(encoding="utf-8"))
    data["comment_key"] = "../../x --><script>"
    (directory / PAYLOAD_FILE).write_text(json.dumps(data), encoding="utf-8")


def _symlinked_results(directory: Path) -> None:
    leave(directory, results(model("mlp")))
    outside = directory.parent / "outside.json"
    outside.write_text(results(model("secret")).to_json(), encoding="utf-8")
    (directory / "results.json").unlink()
    (directory / "results.json").symlink_to(outside)


HOSTILE = {
    "oversized results.json": (_oversized, "over the"),
    "PR of another run": (_wrong_pr, "does not come from the run's repository"),
    "payload of another run": (_other_run, "came from run 903"),
    "commit of another run": (_other_commit, "not the head commit"),
    "malformed JSON": (_malformed, "not valid JSON"),
    "wrong types": (_wrong_types, "wrong type"),
    "path tricks in the comment key": (_traversal_key, "comment_key must be"),
    "results.json a symlink": (_symlinked_results, "not a regular file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_payload_is_rejected_and_nothing_is_posted(tmp_path, gh, case):
    make, reason = HOSTILE[case]
    gh.add_run(OWNER, REPO, 903, head_sha=SHA, head_repository=FORK)
    gh.add_pull(OWNER, REPO, 21, head_sha=SHA, head_repository=FORK)
    gh.add_pull(OWNER, REPO, 23, head_sha=SHA, head_repository="someone-else/models")
    make(tmp_path / "payload")
    if not (tmp_path / "payload" / PAYLOAD_FILE).read_text("utf-8").count('"run_id": "777"'):
        text = (tmp_path / "payload" / PAYLOAD_FILE).read_text("utf-8")
        (tmp_path / "payload" / PAYLOAD_FILE).write_text(text.replace('"901"', '"903"'), "utf-8")
    before = len(gh.requests)
    run = publish(tmp_path, gh, tmp_path / "payload", workflow_run_id=903)
    assert run.returncode == 1, run.log
    assert run.outputs["comment_status"] == "rejected"
    errors = [line for line in run.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and reason in errors[0], run.log
    assert "Traceback" not in run.stderr, run.log
    assert writes(gh, before) == []
    assert "secret" not in run.stdout


def test_no_payload_is_a_warning_not_a_failure(tmp_path, gh):
    (tmp_path / "payload").mkdir()
    run = publish(tmp_path, gh, tmp_path / "payload")
    assert run.returncode == 0, run.log
    assert run.outputs["comment_status"] == "no-payload"
    assert any(line.startswith("::warning") for line in run.stdout.splitlines())


# -- matrix legs and comment keys ------------------------------------------------------------


def test_matrix_legs_merge_into_one_comment_where_a_red_leg_stays_red(tmp_path, gh):
    gh.add_run(OWNER, REPO, 555, head_sha=SHA, pull_requests=(31,))  # this run, same repo
    root = tmp_path / "payload"
    legs = {"linux-py311": STATUS_OK, "macos-py312": STATUS_EXPORT_FAILED, "windows": STATUS_OK}
    for label, status in legs.items():
        error = "torch._dynamo.exc.Unsupported: data-dependent branch" if status != "ok" else None
        head = results(model("encoder", status, error), model(f"only-{label}"))
        leave(
            root / f"observer-ci-payload-{label}",
            head,
            base=results(model("encoder")),
            pr=31,
            run_id="555",
            label=label,
        )
    before = len(gh.requests)
    run = publish(tmp_path, gh, root, pr_event=31, subprocess_run=True)
    assert run.returncode == 0, run.log
    assert run.outputs["comment_status"] == "created"
    assert run.outputs["status"] == "failure" and run.outputs["regressions"] == "1"
    assert writes(gh, before) == [f"POST /repos/{OWNER}/{REPO}/issues/31/comments"]
    (body,) = [c["body"] for c in gh.comments(OWNER, REPO, 31)]
    headline = body.splitlines()[1]
    assert "❌" in headline and "linux-py311+macos-py312+windows" in headline.replace("&#95;", "_")
    merged = RunResults.read(run.out / "results.json")
    assert sorted(m.name for m in merged.models) == [
        "encoder [linux-py311]",
        "encoder [macos-py312]",
        "encoder [windows]",
        "only-linux-py311",
        "only-macos-py312",
        "only-windows",
    ]
    statuses = {m.name: m.status for m in merged.models}
    assert statuses["encoder [macos-py312]"] == STATUS_EXPORT_FAILED


def test_comment_keys_keep_separate_sticky_comments(tmp_path, gh):
    gh.add_run(OWNER, REPO, 904, head_sha=SHA, pull_requests=(41,))
    ids = {}
    for i, key in enumerate(["", "docs", "vision", "docs"]):
        directory = tmp_path / f"payload{i}"
        leave(directory, results(model(f"m{i}")), pr=41, run_id="904", comment_key=key)
        run = publish(tmp_path / f"job{i}", gh, directory, workflow_run_id=904)
        assert run.returncode == 0, run.log
        expected = "updated" if i == 3 else "created"
        assert run.outputs["comment_status"] == expected, run.log
        ids.setdefault(key, run.outputs["comment_url"])
        assert run.outputs["comment_url"] == ids[key]
    bots = gh.comments(OWNER, REPO, 41)
    assert [parse_marker(c["body"]).key for c in bots] == ["default", "docs", "vision"]
    assert "m3" in bots[1]["body"] and "m1" not in bots[1]["body"]  # docs updated in place
    assert "m0" in bots[0]["body"] and "m2" in bots[2]["body"]  # the others untouched


def test_the_publish_job_key_wins_and_the_deprecated_input_still_works(tmp_path, gh):
    gh.add_run(OWNER, REPO, 905, head_sha=SHA, pull_requests=(42,))
    leave(tmp_path / "payload", results(model("mlp")), pr=42, run_id="905", comment_key="a")
    run = publish(
        tmp_path,
        gh,
        tmp_path / "payload",
        workflow_run_id=905,
        INPUT_COMMENT="false",
        INPUT_COMMENT_KEY="b",
    )
    assert run.returncode == 0, run.log
    assert run.outputs["comment_status"] == "disabled" == run.outputs["comment"]
    warnings = [line for line in run.stdout.splitlines() if line.startswith("::warning")]
    assert len(warnings) == 1 and "'comment' is deprecated" in warnings[0]
    assert "post_comment" in warnings[0]
    assert gh.comments(OWNER, REPO, 42) == []
