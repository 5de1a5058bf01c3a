"""The GitHub Action end to end: ``entrypoint.py`` as a real subprocess against a fake GitHub.

Every run is ``[sys.executable, "entrypoint.py"]`` with a GitHub-like environment
(``INPUT_*``, ``GITHUB_*``, event file, step summary and output files) and
``GITHUB_API_URL`` pointing at :class:`tests.support.fake_github.FakeGitHub`, a real
HTTP server on loopback. Each run exports a model (~5-7 s), so the runs are
module-scoped fixtures that several tests assert on:

- ``first_run``: PR 7 with 250 unrelated comments; a 502 on the first GET and on the
  first POST, both retried; creates the sticky comment.
- ``second_run``: PR 7 again; a rate-limit 403 with ``Retry-After: 1`` on the first
  GET; finds the sticky comment on page 3 and PATCHes it.
- ``regression_run``: PR 8; a baseline crafted from the first run's results.json
  (node count shrunk, retired models added so the report is 60,000-65,536 chars);
  exits 1 on node_count_growth; a 422 on the first POST is retried with a shorter report.
- ``fork_run``: PR 9; a plain 403 on POST (read-only token); exit 0, comment=forbidden.
- ``dry_run``: ``--dry-run``, no request reaches the server.
- ``bad_input_runs``: malformed inputs exit 2 with an ``::error``, no traceback.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlsplit

import pytest

from observer_ci.action.accept import strip_section
from observer_ci.core.results import ModelResult, RunResults
from observer_ci.github.sticky import FALLBACK_COMMENT_MAX_CHARS as FALLBACK_COMMENT_LIMIT
from observer_ci.github.sticky import MARKER, parse_marker
from observer_ci.report.markdown import GITHUB_MAX_CHARS, TRUNCATION_NOTE, render_report
from observer_ci.report.rules import Thresholds, compare, parse_fail_on
from tests.support import REPO_ROOT
from tests.support.fake_github import FakeGitHub

ENTRYPOINT = REPO_ROOT / "entrypoint.py"
MLP_SCRIPT = REPO_ROOT / "examples" / "mlp_classifier.py"
# random per session: the secret-hunting scripts read every process on the machine, other
# test sessions' included
TOKEN = f"ghs_e2eSecretToken{secrets.token_hex(12)}"
OWNER, REPO = "octo", "models"
RUN_ID = "4242"
RUN_URL = f"https://github.com/{OWNER}/{REPO}/actions/runs/{RUN_ID}"
FIRST_PR, REGRESSION_PR, FORK_PR = 7, 8, 9
SEEDED = 250
REGRESSION_FAIL_ON = "all,-model_missing"


# -- a fake GitHub that also records request bodies ---------------------------------


class Sent(NamedTuple):
    """One request as the server received it, with the ``body`` field of its JSON."""

    method: str
    path: str
    query: dict[str, str]
    body: str | None


class RecordingFakeGitHub(FakeGitHub):
    """:class:`FakeGitHub` that keeps the comment body of every request (even rejected ones)."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self._sent: list[Sent] = []
        self._sent_lock = threading.Lock()

    def handle(self, method: str, target: str, headers: Any, data: bytes) -> Any:
        body = None
        if data:
            try:
                payload = json.loads(data)
            except ValueError:
                payload = None
            if isinstance(payload, dict) and isinstance(payload.get("body"), str):
                body = payload["body"]
        parts = urlsplit(target)
        with self._sent_lock:
            self._sent.append(Sent(method, parts.path, dict(parse_qsl(parts.query)), body))
        return super().handle(method, target, headers, data)

    @property
    def sent(self) -> list[Sent]:
        with self._sent_lock:
            return list(self._sent)


def list_path(pr: int) -> str:
    return f"/repos/{OWNER}/{REPO}/issues/{pr}/comments"


def sticky_comments(gh: FakeGitHub, pr: int) -> list[dict]:
    return [c for c in gh.comments(OWNER, REPO, pr) if parse_marker(c.get("body"))]


def after_marker(body: str) -> str:
    """A comment or report without its marker line (the posted one carries key/sha/run)."""
    assert parse_marker(body) is not None, body[:200]
    return body.split("\n", 1)[1]


# -- running the action ---------------------------------------------------------------


@dataclass
class Run:
    """One finished ``entrypoint.py`` process and the files it was given."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    out: Path
    summary: Path
    output_file: Path
    requests: list[Sent] = field(default_factory=list)

    @property
    def log(self) -> str:
        head = f"exit {self.returncode} after {self.seconds:.1f}s"
        return f"{head}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"

    @property
    def outputs(self) -> dict[str, str]:
        return parse_outputs(self.output_file.read_text(encoding="utf-8"))

    @property
    def report(self) -> str:
        return (self.out / "report.md").read_text(encoding="utf-8")

    @property
    def results(self) -> RunResults:
        return RunResults.read(self.out / "results.json")

    def written_files(self) -> list[Path]:
        files = [p for p in self.out.rglob("*") if p.is_file()] if self.out.exists() else []
        return [*files, self.summary, self.output_file]


def parse_outputs(text: str) -> dict[str, str]:
    """Parse ``GITHUB_OUTPUT``'s ``name<<DELIMITER`` … ``DELIMITER`` blocks (strictly)."""
    outputs: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if not lines[i]:
            i += 1
            continue
        key, sep, delimiter = lines[i].partition("<<")
        assert sep and delimiter, f"malformed GITHUB_OUTPUT line {lines[i]!r}"
        end = lines.index(delimiter, i + 1)
        assert key not in outputs, f"output {key!r} written twice"
        outputs[key] = "\n".join(lines[i + 1 : end])
        i = end + 1
    return outputs


def run_action(
    tmp: Path,
    gh: RecordingFakeGitHub,
    *,
    pr: int | None = FIRST_PR,
    argv: tuple[str, ...] = (),
    **inputs: str,
) -> Run:
    """Runs the entrypoint once; ``inputs`` (``INPUT_*``/``GITHUB_*``) override the defaults."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "home").mkdir(exist_ok=True)
    event = tmp / "event.json"
    payload: dict[str, Any] = {"action": "synchronize"}
    if pr is not None:
        payload["pull_request"] = {"number": pr, "base": {"sha": "0" * 40, "ref": "main"}}
    event.write_text(json.dumps(payload), encoding="utf-8")
    summary, output_file = tmp / "step_summary.md", tmp / "github_output.txt"
    summary.write_text("", encoding="utf-8")
    output_file.write_text("", encoding="utf-8")
    out = tmp / "out"
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "HOME": str(tmp / "home"),
        "LANG": "C.UTF-8",
        "GITHUB_ACTIONS": "true",
        "GITHUB_API_URL": gh.url,
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": f"{OWNER}/{REPO}",
        "GITHUB_RUN_ID": RUN_ID,
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_WORKSPACE": str(REPO_ROOT),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(output_file),
        "INPUT_TOKEN": TOKEN,
        "INPUT_SCRIPT": str(MLP_SCRIPT),
        "INPUT_OUT": str(out),
        "INPUT_REPEAT": "2",
        "INPUT_FAIL_ON": "default",
        "INPUT_POST_COMMENT": "true",
        **inputs,
    }
    before = len(gh.sent)
    begin = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ENTRYPOINT), *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
    )
    return Run(
        returncode=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        seconds=time.perf_counter() - begin,
        out=out,
        summary=summary,
        output_file=output_file,
        # the check run's calls are the subject of test_history_checks.py
        requests=[r for r in gh.sent[before:] if "/check-runs" not in r.path],
    )


def assert_results_on_disk(run: Run) -> None:
    """results.json and report.md exist, agree with each other, and the summary holds the report."""
    results = run.results
    assert [m.name for m in results.models] == ["mlp_classifier"], run.log
    assert results.label == ""  # no label given: none shown
    report = run.report
    assert report.startswith(MARKER + "\n"), report[:200]
    assert "| mlp_classifier |" in report  # the summary table, raw Markdown readable
    assert f"[Workflow run]({RUN_URL})" in report
    assert run.summary.read_text(encoding="utf-8") == report + "\n"
    outputs = run.outputs
    assert outputs["results_path"] == str(run.out / "results.json")
    assert outputs["report_path"] == str(run.out / "report.md")


def methods(run: Run) -> list[str]:
    return [r.method for r in run.requests]


# -- fixtures: one process per scenario -----------------------------------------------


@pytest.fixture(scope="module")
def gh() -> Iterator[RecordingFakeGitHub]:
    with RecordingFakeGitHub(token=TOKEN) as server:
        server.seed_comments(OWNER, REPO, FIRST_PR, SEEDED, lambda i: f"unrelated comment {i}")
        yield server


@pytest.fixture(scope="module")
def quiet_gh() -> Iterator[RecordingFakeGitHub]:
    """A server that must never be called (dry run, bad inputs)."""
    with RecordingFakeGitHub(token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def first_run(gh, tmp_path_factory) -> Run:
    gh.inject("GET", rf"^{list_path(FIRST_PR)}$", 502, times=1)
    gh.inject("POST", rf"^{list_path(FIRST_PR)}$", 502, times=1)
    run = run_action(tmp_path_factory.mktemp("first"), gh)
    assert gh.pending_faults() == 0, run.log
    return run


@pytest.fixture(scope="module")
def second_run(gh, first_run, tmp_path_factory) -> Run:
    gh.inject(
        "GET",
        rf"^{list_path(FIRST_PR)}$",
        403,
        headers={"Retry-After": "1", "X-RateLimit-Remaining": "0"},
        body={"message": "You have exceeded a secondary rate limit. Please wait."},
        times=1,
    )
    run = run_action(tmp_path_factory.mktemp("second"), gh)
    assert gh.pending_faults() == 0, run.log
    return run


def padded_baseline(head: RunResults, n_retired: int) -> RunResults:
    """The first run's results with the MLP's node count shrunk and retired models added."""
    base = RunResults.from_dict(json.loads(head.to_json()))
    base.label = "main"
    mlp = base.by_name()["mlp_classifier"]
    assert mlp.export is not None and mlp.export.node_count and mlp.export.node_count > 1
    mlp.export.node_count = 1
    base.models.extend(
        ModelResult(
            name=f"retired-model-{i:04d}-" + "x" * 180, script="observe/retired.py", status="ok"
        )
        for i in range(n_retired)
    )
    return base


def report_chars(head: RunResults, base: RunResults) -> int:
    regressions = compare(head, base, Thresholds(), parse_fail_on(REGRESSION_FAIL_ON))
    return len(render_report(head, regressions, base, max_chars=10**9, run_url=RUN_URL))


def baseline_for_a_long_report(head: RunResults) -> RunResults:
    """Pads the baseline so the full report lands mid-way between the two comment limits.

    Then the first attempt posts the full report and the 422 retry must post a shorter one.
    """
    target = (FALLBACK_COMMENT_LIMIT + GITHUB_MAX_CHARS) // 2
    size0 = report_chars(head, padded_baseline(head, 0))
    per_model = report_chars(head, padded_baseline(head, 1)) - size0
    n = max(0, round((target - size0) / per_model))
    size = report_chars(head, padded_baseline(head, n))
    if n:  # one secant step: the first retired model costs more than the average one
        n = max(0, round(n * (target - size0) / (size - size0)))
    base = padded_baseline(head, n)
    size = report_chars(head, base)
    assert abs(size - target) < 1000, (size, target, n)
    return base


@pytest.fixture(scope="module")
def regression_run(gh, first_run, tmp_path_factory) -> Run:
    tmp = tmp_path_factory.mktemp("regression")
    baseline = tmp / "baseline-results.json"
    baseline_for_a_long_report(first_run.results).write(baseline)
    gh.inject(
        "POST",
        rf"^{list_path(REGRESSION_PR)}$",
        422,
        body={
            "message": "Validation Failed",
            "errors": [
                {
                    "resource": "IssueComment",
                    "code": "custom",
                    "field": "body",
                    "message": "body is too long (maximum is 65536 characters)",
                }
            ],
        },
        times=1,
    )
    run = run_action(
        tmp,
        gh,
        pr=REGRESSION_PR,
        INPUT_BASELINE=str(baseline),
        INPUT_FAIL_ON=REGRESSION_FAIL_ON,
    )
    assert gh.pending_faults() == 0, run.log
    return run


@pytest.fixture(scope="module")
def fork_run(gh, tmp_path_factory) -> Run:
    gh.inject(
        "POST",
        rf"^{list_path(FORK_PR)}$",
        403,
        body={"message": "Resource not accessible by integration"},
        times=1,
    )
    run = run_action(tmp_path_factory.mktemp("fork"), gh, pr=FORK_PR)
    assert gh.pending_faults() == 0, run.log
    return run


@pytest.fixture(scope="module")
def dry_run(quiet_gh, tmp_path_factory) -> Run:
    return run_action(tmp_path_factory.mktemp("dry"), quiet_gh, argv=("--dry-run",))


# Repository code that looks for secrets everywhere it can: its environment, every
# readable /proc/*/environ and /proc/*/cmdline (the action's own process among them), then
# prints workflow commands of its own. It observes no model (a script_failed row).
DUMP_SCRIPT = """
import json, os, pathlib, sys
kind = sys.argv[1] if len(sys.argv) > 1 else "script"
found = {"environ": dict(os.environ), "proc": {}, "denied": [], "ancestors": []}
for d in pathlib.Path("/proc").iterdir():
    if d.name.isdigit():
        for name in ("environ", "cmdline"):
            try:
                found["proc"][d.name + "/" + name] = (d / name).read_bytes().decode("latin-1")
            except OSError as e:
                found["denied"].append(d.name + "/" + name + ": " + type(e).__name__)
pid = os.getpid()
while pid > 1:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    pid = int(stat.rsplit(")", 1)[1].split()[1])
    found["ancestors"].append(pid)
out = pathlib.Path(os.environ["DUMP_DIR"]) / f"{kind}-{os.getpid()}.json"
out.write_text(json.dumps(found))
print("::error title=forged::annotation from the script")
print("::add-mask::visible")
print("no newline at the end", end="")
"""
SECRETS = {
    "INPUT_TOKEN": TOKEN,
    "GITHUB_TOKEN": f"ghs_githubToken{secrets.token_hex(12)}",
    "ACTIONS_RUNTIME_TOKEN": f"runtimeToken{secrets.token_hex(12)}",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": f"idTokenRequest{secrets.token_hex(12)}",
    "ACTIONS_ID_TOKEN_REQUEST_URL": f"https://oidc.example/{secrets.token_hex(12)}",
    "HF_TOKEN": f"hf_userToken{secrets.token_hex(12)}",
}


def write_dump_script(tmp: Path) -> tuple[Path, Path]:
    dumps = tmp / "dumps"
    dumps.mkdir(parents=True, exist_ok=True)
    script = tmp / "dump_secrets.py"
    script.write_text(DUMP_SCRIPT, encoding="utf-8")
    return script, dumps


def assert_no_secret_in_dumps(dumps: Path, expected_kinds: set[str]) -> None:
    files = sorted(dumps.glob("*.json"))
    assert {f.name.split("-")[0] for f in files} == expected_kinds, files
    for path in files:
        text = path.read_text(encoding="utf-8")
        found = json.loads(text)
        assert found["environ"]["DUMP_DIR"] == str(dumps)  # it did read its environment
        assert any(k.endswith("/environ") for k in found["proc"])  # and some /proc files
        for name, value in SECRETS.items():
            assert value not in text, (path.name, name)
        # the action's process is an ancestor: its environment was unreadable or clean
        action = [
            pid
            for pid in found["ancestors"]
            if "entrypoint.py" in found["proc"].get(f"{pid}/cmdline", "")
        ]
        assert action, found["ancestors"]


@pytest.fixture(scope="module")
def install_run(quiet_gh, tmp_path_factory) -> Run:
    # repository code that looks for the token: it must not find it
    tmp = tmp_path_factory.mktemp("install")
    script, dumps = write_dump_script(tmp)
    leak = (
        f'{sys.executable} {script} install; echo "install saw token=[$INPUT_TOKEN] '
        '[$GITHUB_TOKEN]"; exit 3'
    )
    return run_action(
        tmp, quiet_gh, argv=("--dry-run",), INPUT_INSTALL=leak, DUMP_DIR=str(dumps), **SECRETS
    )


def test_failed_install_is_a_result_row_and_never_sees_the_token(install_run):
    assert install_run.returncode == 1, install_run.log
    rows = {m.name: m for m in install_run.results.models}
    assert rows["install"].status == "script_failed"
    assert "install saw token=[] []" in rows["install"].error
    assert "exited with 3" in rows["install"].error
    assert "install" in install_run.report
    assert_no_secret_in_dumps(install_run.out.parent / "dumps", {"install"})


def guarded_lines(stdout: str) -> set[int]:
    """Indexes of the stdout lines inside a ``::stop-commands::`` guard."""
    inside, token, lines = set(), None, stdout.split("\n")
    for i, line in enumerate(lines):
        if token is None and line.startswith("::stop-commands::"):
            token = line.split("::")[2]
            assert len(token) >= 32, line
        elif token is not None and line == f"::{token}::":
            token = None
        elif token is not None:
            inside.add(i)
    assert token is None, "a guard was left open"
    return inside


# -- issue 7: two actions at once, a person's marker, secrets hunted by the script ---------

RACE_PR = 20
RACE_RUNS = ("5001", "5002")


@pytest.fixture(scope="module")
def race_gh() -> Iterator[RecordingFakeGitHub]:
    with RecordingFakeGitHub(token=TOKEN) as server:
        server.latency_s = 0.02
        yield server


@pytest.fixture(scope="module")
def race_runs(race_gh, tmp_path_factory) -> dict[str, Run]:
    """Two actions started together on one PR; both list the comments before either
    posts (the fake holds the first two listings until both arrived), so both create."""
    people = race_gh.seed_comments(
        OWNER,
        REPO,
        RACE_PR,
        2,
        lambda i: f"{MARKER}\nmy own notes" if i == 0 else f"> {MARKER}\n> quoted report",
        login="octocat",
    )
    race_gh.hold("GET", rf"^{list_path(RACE_PR)}$", 2, timeout_s=120)
    tmp = tmp_path_factory.mktemp("race")
    script, dumps = write_dump_script(tmp)
    runs: dict[str, Run] = {}

    def one(run_id: str) -> None:
        runs[run_id] = run_action(
            tmp / run_id,
            race_gh,
            pr=RACE_PR,
            INPUT_SCRIPT=str(script),
            GITHUB_RUN_ID=run_id,
            DUMP_DIR=str(dumps),
            **SECRETS,
        )

    threads = [threading.Thread(target=one, args=(run_id,)) for run_id in RACE_RUNS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert race_gh.comments(OWNER, REPO, RACE_PR)[:2] == people  # untouched
    return runs


def test_two_actions_at_once_end_with_exactly_one_comment_holding_the_newer_report(
    race_gh, race_runs
):
    for run in race_runs.values():
        assert run.returncode == 1, run.log  # the script observed nothing: script_failed
        assert run.outputs["comment"] in ("created", "updated", "superseded"), run.log
    posts = [r for r in race_gh.sent if r.method == "POST" and "/check-runs" not in r.path]
    assert len(posts) == 2  # the race did happen: both created a comment
    comments = race_gh.comments(OWNER, REPO, RACE_PR)
    ours = [c for c in comments if c["user"]["login"] == "github-actions[bot]"]
    assert len(ours) == 1, comments
    assert parse_marker(ours[0]["body"]).run == int(max(RACE_RUNS))
    assert [r.method for r in race_gh.sent].count("DELETE") >= 1
    # a person's comment carrying the marker (first line, or quoted) was never touched
    assert len(comments) == 3
    touched = {r.path.rsplit("/", 1)[-1] for r in race_gh.sent if r.method in ("PATCH", "DELETE")}
    assert not touched & {str(c["id"]) for c in comments[:2]}


def test_the_scripts_find_no_secret_anywhere(race_runs):
    dumps = next(iter(race_runs.values())).out.parent.parent / "dumps"
    assert_no_secret_in_dumps(dumps, {"script"})
    assert len(list(dumps.glob("*.json"))) == 2


def test_workflow_commands_printed_by_the_scripts_stay_inside_the_guard(race_runs):
    for run in race_runs.values():
        lines = run.stdout.split("\n")
        inside = guarded_lines(run.stdout)
        forged = [i for i, line in enumerate(lines) if "forged" in line or "add-mask" in line]
        assert len(forged) == 2, run.stdout
        assert set(forged) <= inside
        # our own annotations are outside it
        ours = [i for i, line in enumerate(lines) if line.startswith("::error title=observer-ci")]
        assert ours and not set(ours) & inside


# -- issue 7: bad files, a missing event file, a crash of our own --------------------------


@pytest.fixture(scope="module")
def broken_run(quiet_gh, tmp_path_factory) -> Run:
    """A malformed baseline, a missing event file, and GITHUB_OUTPUT that cannot be
    written (a directory): the last step crashes, everything before it is kept."""
    tmp = tmp_path_factory.mktemp("broken")
    baseline = tmp / "baseline.json"
    baseline.write_text(json.dumps({"schema_version": 1, "models": [{"bogus": 1}]}))
    script = tmp / "observes_nothing.py"
    script.write_text("print('nothing to observe')\n")
    (tmp / "outputs-dir").mkdir()
    return run_action(
        tmp,
        quiet_gh,
        INPUT_SCRIPT=str(script),
        INPUT_BASELINE=str(baseline),
        GITHUB_EVENT_PATH=str(tmp / "no-such-event.json"),
        GITHUB_OUTPUT=str(tmp / "outputs-dir"),
    )


def test_bad_files_are_warnings_and_an_internal_crash_exits_3_keeping_what_exists(broken_run):
    run = broken_run
    assert run.returncode == 3, run.log
    assert "Traceback" in run.stdout  # inside the guard, for the bug report
    assert all(
        i in guarded_lines(run.stdout)
        for i, line in enumerate(run.stdout.split("\n"))
        if line.startswith("Traceback")
    )
    errors = [line for line in run.stdout.splitlines() if line.startswith("::error ")]
    assert any(
        "observer-ci internal error" in line and "IsADirectoryError" in line for line in errors
    ), run.stdout
    warnings = [line for line in run.stdout.splitlines() if line.startswith("::warning ")]
    assert any("could not be read" in w and "malformed results" in w for w in warnings), warnings
    assert any("no-such-event.json does not exist" in w for w in warnings), warnings
    # results, report and summary were written before the crash, warnings included
    assert [m.name for m in run.results.models] == ["observes_nothing"]
    summary = run.summary.read_text(encoding="utf-8")
    for text in (run.report, summary):
        assert "could not be read" in text
        assert "does not exist" in text
    assert quiet_gh_untouched(run)


def quiet_gh_untouched(run: Run) -> bool:
    return run.requests == []  # no pull request known: nothing posted


BAD_INPUTS = {
    "timeout": ({"INPUT_TIMEOUT_MINUTES": "inf"}, "input 'timeout_minutes' must be"),
    "fail_on": ({"INPUT_FAIL_ON": "bogus"}, "unknown fail-on rule 'bogus'"),
    "repeat": ({"INPUT_REPEAT": "ten"}, "input 'repeat' must be an integer"),
    "thresholds": ({"INPUT_THRESHOLDS": "abs_max=lots"}, "threshold 'abs_max'"),
    "script": ({"INPUT_SCRIPT": "  "}, "input 'script' is required"),
    "dry_run": ({"INPUT_DRY_RUN": "maybe"}, "input 'dry_run' must be true or false"),
}


@pytest.fixture(scope="module")
def bad_input_runs(quiet_gh, tmp_path_factory) -> dict[str, Run]:
    return {
        name: run_action(tmp_path_factory.mktemp(f"bad_{name}"), quiet_gh, **inputs)
        for name, (inputs, _) in BAD_INPUTS.items()
    }


# -- 1. first run: pagination over 250 comments, 502s retried, one comment created -------


def test_first_run_succeeds_and_writes_results_summary_and_outputs(first_run):
    assert first_run.returncode == 0, first_run.log
    assert_results_on_disk(first_run)
    outputs = first_run.outputs
    assert outputs["status"] == "success"
    assert outputs["comment"] == "created"
    assert outputs["regressions"] == "0"
    assert "::error" not in first_run.stdout


def test_first_run_retries_the_502s_and_creates_exactly_one_sticky_comment(gh, first_run):
    # GET /user (refused to an App token), GET (502) retried, pages 1-3 of the 250 seeded
    # comments, POST (502): it may have taken effect, so the comments are listed again
    # (pages 1-3) before the second POST; then once more, to catch a racing copy
    expected = ["GET", "GET", "GET", "GET", "GET", "POST", "GET", "GET", "GET", "POST"]
    expected += ["GET", "GET", "GET"]
    assert methods(first_run) == expected, first_run.requests
    assert first_run.requests[0].path == "/user"
    listing = first_run.requests[1:]
    pages = [r.query.get("page") for r in listing if r.method == "GET"]
    assert pages == [None, None, "2", "3", None, "2", "3", None, "2", "3"]
    assert all(r.path == list_path(FIRST_PR) for r in listing)
    assert re.search(r"failed \(502\), retry 1/\d+", first_run.stderr), first_run.stderr
    comments = gh.comments(OWNER, REPO, FIRST_PR)
    assert len(comments) == SEEDED + 1
    sticky = sticky_comments(gh, FIRST_PR)
    assert len(sticky) == 1
    marker = parse_marker(sticky[0]["body"])
    assert (marker.key, marker.run) == ("default", int(RUN_ID))
    assert after_marker(sticky[0]["body"]) == after_marker(first_run.report)  # posted in full
    assert first_run.outputs["comment_url"] == sticky[0]["html_url"]


# -- 2 + 4. second run: rate-limit 403 waited for, same comment updated -----------------


def test_second_run_waits_for_the_rate_limit_then_updates_the_same_comment(
    gh, first_run, second_run
):
    assert second_run.returncode == 0, second_run.log
    assert_results_on_disk(second_run)
    assert second_run.outputs["comment"] == "updated"
    assert second_run.outputs["status"] == "success"
    # the 403 is waited for (Retry-After: 1), then the sticky comment is found on page 3
    assert re.search(r"failed \(403\), retry 1/\d+ in 1\.0s", second_run.stderr), second_run.log
    assert methods(second_run) == ["GET", "GET", "GET", "GET", "GET", "PATCH"], second_run.log
    pages = [r.query.get("page") for r in second_run.requests[1:] if r.method == "GET"]
    assert pages == [None, None, "2", "3"]
    sticky = sticky_comments(gh, FIRST_PR)
    assert len(sticky) == 1
    patch_path = f"/repos/{OWNER}/{REPO}/issues/comments/{sticky[0]['id']}"
    assert second_run.requests[-1].path == patch_path
    assert len(gh.comments(OWNER, REPO, FIRST_PR)) == SEEDED + 1
    assert after_marker(sticky[0]["body"]) == after_marker(second_run.report)
    assert sticky[0]["updated_at"] > sticky[0]["created_at"]
    assert second_run.outputs["comment_url"] == first_run.outputs["comment_url"]


# -- 3 + 6. regression: exit 1, and a 422 retried with a shorter report ---------------


def test_regression_fails_the_build_with_an_error_annotation(regression_run):
    assert regression_run.returncode == 1, regression_run.log
    assert_results_on_disk(regression_run)
    outputs = regression_run.outputs
    assert outputs["status"] == "failure"
    assert int(outputs["regressions"]) >= 1
    assert int(outputs["warnings"]) >= 100  # the retired models: model_missing is not failing
    error_lines = [line for line in regression_run.stdout.splitlines() if line.startswith("::")]
    growth = [line for line in error_lines if "node_count_growth" in line]
    assert len(growth) == 1 and growth[0].startswith(
        "::error title=observer-ci%3A mlp_classifier%3A node_count_growth::ONNX node count"
    ), error_lines[:5]
    missing = [line for line in error_lines if "model_missing" in line]
    assert missing and all(line.startswith("::warning ") for line in missing)
    head_nodes = regression_run.results.by_name()["mlp_classifier"].export.node_count
    assert head_nodes > 1
    assert f"1 → {head_nodes}" in growth[0]
    base = RunResults.read(regression_run.out / "base-results.json")
    assert base.label == "main" and base.by_name()["mlp_classifier"].export.node_count == 1
    report = regression_run.report
    assert " base **main**." in report
    assert "❌ observer-ci: " in report.split("\n")[1]
    assert "| node_count_growth |" in report


def test_regression_comment_is_still_posted_after_a_422_with_a_shorter_report(gh, regression_run):
    full = regression_run.report
    assert FALLBACK_COMMENT_LIMIT < len(full) <= GITHUB_MAX_CHARS, len(full)
    posts = [r for r in regression_run.requests if r.method == "POST"]
    assert len(posts) == 2, regression_run.requests
    rejected, accepted = posts[0].body, posts[1].body
    # the full report fitted the limit; the comment adds the accept path's (hidden) section
    assert strip_section(after_marker(rejected)) == after_marker(full)
    assert "observer-ci:accepted" in rejected
    assert accepted is not None and len(accepted) <= FALLBACK_COMMENT_LIMIT < len(rejected)
    assert parse_marker(accepted).run == int(RUN_ID)
    assert TRUNCATION_NOTE in accepted
    assert "retrying with a shorter report" in regression_run.stderr
    sticky = sticky_comments(gh, REGRESSION_PR)
    assert [c["body"] for c in sticky] == [accepted]
    assert regression_run.outputs["comment"] == "created"
    assert regression_run.outputs["comment_url"] == sticky[0]["html_url"]


# -- 5. fork PR: plain 403 on POST ---------------------------------------------------


def test_fork_pr_403_is_a_warning_and_the_exit_code_reflects_regressions_only(gh, fork_run):
    assert fork_run.returncode == 0, fork_run.log
    assert_results_on_disk(fork_run)
    outputs = fork_run.outputs
    assert outputs["comment"] == "forbidden"
    assert outputs["status"] == "success"
    assert "comment_url" not in outputs
    warnings = [line for line in fork_run.stdout.splitlines() if line.startswith("::warning")]
    assert len(warnings) == 1, fork_run.stdout
    assert "fork" in warnings[0] and "HTTP 403" in warnings[0]
    assert "Resource not accessible by integration" in warnings[0]
    # a plain 403 is a permission problem: not retried
    assert methods(fork_run) == ["GET", "GET", "POST"], fork_run.requests
    assert gh.comments(OWNER, REPO, FORK_PR) == []


# -- 7. the token never leaks ----------------------------------------------------------


def test_token_never_appears_in_any_output_or_written_file(
    first_run,
    second_run,
    regression_run,
    fork_run,
    dry_run,
    bad_input_runs,
    install_run,
    race_runs,
    broken_run,
):
    runs = {
        "broken": broken_run,
        **{f"race_{k}": v for k, v in race_runs.items()},
        "install": install_run,
        "first": first_run,
        "second": second_run,
        "regression": regression_run,
        "fork": fork_run,
        "dry": dry_run,
        **{f"bad_{k}": v for k, v in bad_input_runs.items()},
    }
    checked = 0
    for name, run in runs.items():
        assert TOKEN not in run.stdout, name
        assert TOKEN not in run.stderr, name
        for path in run.written_files():
            assert TOKEN.encode() not in path.read_bytes(), (name, path)
            checked += 1
    assert checked > 20  # results, reports, ONNX files, summaries and outputs were all read


def test_the_token_is_what_authenticated_the_posts(gh, first_run):
    # the fake answers 401 without `Authorization: Bearer <TOKEN>`: the comment exists
    assert len(sticky_comments(gh, FIRST_PR)) == 1
    assert all(h.get("Authorization") == "***" for h in gh.request_headers)


# -- 8. dry run ------------------------------------------------------------------------


def test_dry_run_posts_nothing_but_writes_everything(quiet_gh, dry_run):
    assert dry_run.returncode == 0, dry_run.log
    assert_results_on_disk(dry_run)
    assert dry_run.requests == []
    assert dry_run.outputs["comment"] == "dry-run"
    assert dry_run.outputs["status"] == "success"
    assert "dry run: not posting" in dry_run.stderr


# -- 9. bad inputs -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_a_clear_error_and_no_traceback(bad_input_runs, name):
    run = bad_input_runs[name]
    _, expected = BAD_INPUTS[name]
    assert run.returncode == 2, run.log
    errors = [line for line in run.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1, run.log
    assert errors[0].startswith("::error title=observer-ci::")
    assert expected in errors[0]
    assert "Traceback" not in run.stderr + run.stdout
    assert not run.out.exists()  # nothing ran
    assert run.outputs == {"status": "bad-input"}  # written on this exit path too
    assert run.requests == []
    summary = run.summary.read_text(encoding="utf-8")
    assert "bad input" in summary and expected.split("'")[0] in summary


def test_no_request_ever_reached_the_quiet_server(quiet_gh, dry_run, bad_input_runs):
    assert len(bad_input_runs) == len(BAD_INPUTS)
    assert quiet_gh.sent == []
    assert quiet_gh.requests == []


def test_every_output_written_is_declared_in_action_yml(first_run, fork_run):
    import yaml

    declared = set(yaml.safe_load((REPO_ROOT / "action.yml").read_text())["outputs"])
    written = set(first_run.outputs) | set(fork_run.outputs)
    assert {"status", "comment", "comment_url", "results_path"} <= written
    assert written <= declared
