"""A newcomer's first hour (issue 20), with real processes: ``python -m observer_ci run`` and
the action's entrypoint in a temporary workspace. Usage mistakes exit 2 before anything runs;
a model never called gets a cause in the user's terms; every "wrote" names what was written;
labels appear only when given; ``status`` is written on every exit path; the job log is quiet
(no library dumps or warnings), says failures in our words and folds its groups."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

TINY = (
    "import torch, observer_ci\n"
    "model = torch.nn.Linear(4, 3).eval()\n"
    "with torch.no_grad(), observer_ci.observe(model, name='tiny'):\n"
    "    model(torch.randn(2, 4)); model(torch.randn(3, 4))\n"
)
NEVER_CALLED = (
    "import torch, observer_ci\n"
    "model = torch.nn.Linear(4, 3).eval()\n"
    "with observer_ci.observe(model, name='idle'):\n"
    "    pass\n"
)
# data-dependent control flow: torch.export fails and prints the partial graph on stderr
BRANCHES = (
    "import torch, observer_ci\n"
    "class Branch(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        return x * 2 if x.sum() > 0 else x - 1\n"
    "model = Branch().eval()\n"
    "with observer_ci.observe(model, name='branches'):\n"
    "    model(torch.randn(2, 3)); model(torch.randn(3, 3))\n"
)
# an LSTM's export warns (UserWarning about _flat_weights), from torch's own frames
LSTM = (
    "import torch, observer_ci\n"
    "class Tagger(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__(); self.lstm = torch.nn.LSTM(8, 8, batch_first=True)\n"
    "    def forward(self, x):\n"
    "        return self.lstm(x)[0]\n"
    "model = Tagger().eval()\n"
    "with torch.no_grad(), observer_ci.observe(model, name='tagger'):\n"
    "    model(torch.randn(2, 3, 8)); model(torch.randn(3, 5, 8))\n"
)
RAN = "open('ran', 'w').write('the script ran')\n"


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_")) and k != "OBSERVER_CI_LOG_GROUPS"
    }
    env.update(PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", **extra)
    return env


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "observer_ci", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def action(workspace: Path, **inputs: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """The action's entrypoint (dry run) on ``workspace``; its process and step outputs."""
    output = workspace / "github_output.txt"
    given = {"out": str(workspace / "out"), "repeat": "1", **inputs}
    env = _env(
        GITHUB_ACTIONS="true",
        GITHUB_WORKSPACE=str(workspace),
        GITHUB_OUTPUT=str(output),
        GITHUB_STEP_SUMMARY=str(workspace / "summary.md"),
        **{f"INPUT_{k.upper()}": v for k, v in given.items()},
    )
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "entrypoint.py"), "--dry-run"],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, read_outputs(output)


def read_outputs(path: Path) -> dict[str, str]:
    """``GITHUB_OUTPUT``'s ``name<<delimiter`` blocks."""
    if not path.is_file():
        return {}
    found = re.findall(r"^(\w+)<<(\S+)\n(.*?)\n\2$", path.read_text(), re.M | re.S)
    return {name: value for name, _, value in found}


# -- usage mistakes ---------------------------------------------------------------------------


def test_path_mistakes_exit_2_before_anything_runs_naming_each_and_what_matched(tmp_path):
    (tmp_path / "good.py").write_text(RAN)
    (tmp_path / "models").mkdir()
    (tmp_path / "sub1").mkdir()
    proc = cli(tmp_path, "run", "good.py", "missing.py", "nomatch*.py", "models", "sub*")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert "'missing.py': no such file" in err
    assert "the glob 'nomatch*.py' matched no file" in err
    assert "'models' is a directory, not a script: give the scripts in it ('models/*.py')" in err
    assert "the glob 'sub*' matched no readable file, only: sub1" in err
    assert not (tmp_path / "ran").exists()  # nothing ran, not even the good script
    assert not (tmp_path / "observer-ci-out").exists()  # nothing written
    assert "script_failed" not in proc.stdout + err


def test_the_action_maps_a_path_mistake_and_a_bad_input_to_bad_input_on_every_path(tmp_path):
    (tmp_path / "ws").mkdir()
    ws = tmp_path / "ws"
    proc, outputs = action(ws, script="models/*.py")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert outputs == {"status": "bad-input"}
    assert "the glob 'models/*.py' matched no file" in proc.stdout  # the ::error annotation
    assert "bad input" in (ws / "summary.md").read_text()
    assert not (ws / "out").exists()  # nothing ran
    (ws / "github_output.txt").unlink()
    # with an install command the paths are checked again once it ran: still missing, exit 2
    proc, outputs = action(ws, script="models/*.py", install="touch installed")
    assert proc.returncode == 2 and outputs == {"status": "bad-input"}, proc.stdout
    assert (ws / "installed").exists() and "matched no file" in proc.stdout
    (ws / "github_output.txt").unlink()
    proc, outputs = action(ws, script="x.py", repeat="ten")
    assert proc.returncode == 2 and outputs == {"status": "bad-input"}, proc.stdout


def test_a_script_the_install_command_creates_is_run_not_refused(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    install = f"mkdir -p models && printf %s {shlex.quote(RAN)} > models/made.py"
    proc, outputs = action(ws, script="models/*.py", install=install)
    assert outputs.get("status") != "bad-input", proc.stdout + proc.stderr
    assert (ws / "ran").read_text() == "the script ran"  # the script install made ran
    assert "matched no file" not in proc.stdout


# -- a model never called, labels, what was written ---------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """One run of a tiny model and of a model never called (``observer-ci run``)."""
    ws = tmp_path_factory.mktemp("runs")
    (ws / "tiny.py").write_text(TINY)
    (ws / "idle.py").write_text(NEVER_CALLED)
    tiny = cli(ws, "run", "tiny.py", "--out", "tiny", "--repeat", "1", "--no-probe")
    idle = cli(ws, "run", "idle.py", "--out", "idle", "--repeat", "1")
    return {"ws": ws, "tiny": tiny, "idle": idle}


def test_a_model_never_called_gets_a_cause_and_a_next_step_in_the_users_terms(runs):
    proc = runs["idle"]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = json.loads((runs["ws"] / "idle" / "results.json").read_text())["models"]
    assert row["status"] == "observe_failed"
    summary = "`observe(model)` was entered but `model(...)` was never called inside it"
    assert row["cause"]["summary"].startswith(summary)
    assert (
        "inside the `with observer_ci.observe(model, name=...):` block"
        in (row["cause"]["next_step"])
    )
    # the status and the rule agree, and the line is whole (not cut mid-word)
    (fail,) = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert fail == f"FAIL  idle: observe_failed: {row['cause']['summary']}"
    everything = proc.stdout + proc.stderr + (runs["ws"] / "idle" / "report.md").read_text()
    assert "infer_arguments" not in everything and "…" not in fail


def test_labels_appear_only_when_given_and_compare_says_what_it_wrote(runs):
    ws = runs["ws"]
    assert runs["tiny"].returncode == 0, runs["tiny"].stdout + runs["tiny"].stderr
    results = ws / "tiny" / "results.json"
    assert json.loads(results.read_text())["label"] == ""
    assert f"wrote {Path('tiny') / 'results.json'} and {Path('tiny') / 'report.md'}" in (
        runs["tiny"].stdout
    )
    proc = cli(ws, "compare", str(results), str(results), "--out", "cmp")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (ws / "cmp").iterdir()) == ["report.md"]
    assert proc.stdout.splitlines()[-1] == f"wrote {Path('cmp') / 'report.md'}"
    report = (ws / "cmp" / "report.md").read_text()
    assert "Compared with the base run." in report and "head" not in report.split("\n\n")[1]
    proc = cli(ws, "merge", str(results), str(results), "--out", "merged")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged = json.loads((ws / "merged" / "results.json").read_text())
    assert [m["name"] for m in merged["models"]] == ["tiny [part1]", "tiny [part2]"]
    assert merged["label"] == ""  # no part was given one
    assert "[head]" not in (ws / "merged" / "report.md").read_text()


# -- the job log ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def action_log(tmp_path_factory) -> dict:
    ws = tmp_path_factory.mktemp("log")
    (ws / "branches.py").write_text(BRANCHES)
    (ws / "tagger.py").write_text(LSTM)
    proc, outputs = action(ws, script="branches.py tagger.py")
    return {"ws": ws, "proc": proc, "outputs": outputs, "log": proc.stdout + proc.stderr}


def _lines_outside_the_guard(log: str) -> list[str]:
    """The lines the runner reads as ours: outside every stop-commands guard."""
    outside, token = [], None
    for line in log.splitlines():
        if token is None:
            match = re.fullmatch(r"::stop-commands::(\w+)", line)
            if match:
                token = match.group(1)
            else:
                outside.append(line)
        elif line == f"::{token}::":
            token = None
    assert token is None, "a guard was left open"
    return outside


def test_the_log_shows_no_library_dump_and_no_warning(action_log):
    log = action_log["log"]
    assert action_log["proc"].returncode == 1, log  # branches fails to export
    assert action_log["outputs"]["status"] == "failure"
    for noise in ("def forward", "GraphModule", "UserWarning", "_flat_weights", "torchvision"):
        assert noise not in log, noise
    assert not re.search(r"^[WE]\d{4} ", log, re.M)  # torch's own log lines


def test_a_failure_headline_is_the_cause_and_the_raw_tail_is_a_folding_group(action_log):
    log = action_log["log"]
    (headline,) = [line for line in log.splitlines() if "branches: export failed:" in line]
    assert headline.endswith(
        "branches: export failed: the model branches on the values inside a tensor "
        "(data-dependent control flow); torch.export records shapes, not values, so it "
        "cannot follow a Python `if` on them"
    )
    assert "\\n" not in headline and "stack trace" not in headline
    ours = _lines_outside_the_guard(log)
    groups = [line for line in ours if line.startswith(("::group::", "::endgroup::"))]
    assert "::group::branches: the error" in groups  # the runner reads it: the log folds
    assert groups.count("::endgroup::") == len(groups) // 2
    assert not [line for line in log.splitlines() if line.startswith("[observer-ci:")]
    raw = log.split("::group::branches: the error", 1)[1].split("::endgroup::", 1)[0]
    assert "TorchExportError" in raw and "Refer to the full stack trace" in raw


def test_verbose_shows_what_the_libraries_say(tmp_path):
    (tmp_path / "tagger.py").write_text(LSTM)
    proc = cli(tmp_path, "run", "tagger.py", "--verbose", "--no-probe", "--repeat", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "UserWarning" in proc.stderr and "_flat_weights" in proc.stderr


def test_one_line_per_phase_per_model_and_one_wrote_line_naming_the_files(action_log):
    log, ws = action_log["log"], action_log["ws"]
    tagger = [line for line in log.splitlines() if re.search(r"\] \+[\d.]+s tagger", line)]
    assert [re.sub(r".*tagger: (\w+).*", r"\1", line) for line in tagger] == [
        "exported",
        "replayed",
        "ok",
    ]
    wrote = [line for line in log.splitlines() if "wrote " in line]
    out = ws / "out"
    assert wrote == [f"[observer-ci] wrote {out / 'results.json'} and {out / 'report.md'}"]
    assert (out / "results.json").is_file() and (out / "report.md").is_file()
    assert json.loads((out / "results.json").read_text())["label"] == ""
    assert "head" not in (out / "report.md").read_text().split("\n\n")[0]


OFF = (
    "import torch, observer_ci\n"
    "class Off(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__(); self.linear = torch.nn.Linear(4, 3)\n"
    "    def forward(self, x):\n"
    "        y = self.linear(x)\n"
    "        return y if torch.compiler.is_exporting() else y + 0.5\n"
    "model = Off().eval()\n"
    "with torch.no_grad(), observer_ci.observe(model, name='off'):\n"
    "    model(torch.randn(2, 4)); model(torch.randn(3, 4))\n"
)


def test_a_failing_graph_leaves_its_bundle_as_an_output_the_report_names_with_the_command(
    tmp_path,
):
    (tmp_path / "off.py").write_text(OFF)
    proc, outputs = action(tmp_path, script="off.py", label="py3.11")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the discrepancy fails the build
    bundles = Path(outputs["bundles_path"])
    assert bundles == tmp_path / "out" / "head" / "bundles"
    assert (bundles / "off" / "model" / "bundle.json").is_file()  # <model>/<graph>/ inside
    assert outputs["bundles_artifact"] == "observer-ci-bundles-py3.11"  # one name per leg
    report = (tmp_path / "out" / "report.md").read_text()
    assert "`gh run download RUN_ID -n observer-ci-bundles -D bundles`" in report  # a code span
    assert "observer-ci replay bundles/off/model" in report
