"""Pull-request code against the runner's step files and the action's own files, with real
processes: ``entrypoint.py`` as a subprocess, an ``install`` command and an observation script
that hunt for ``GITHUB_OUTPUT``/``GITHUB_ENV``/``GITHUB_PATH``/``GITHUB_STATE``/
``GITHUB_STEP_SUMMARY`` (and a future file command) through their environment, the parent's
``/proc/<pid>/environ`` and ``/proc/<pid>/fd``, and a directory listing, write forged lines
(``status=success-FORGED``, an unclosed heredoc, ``LD_PRELOAD=``, a ``PATH`` entry), replace a
file by another inode, and leave a ``setsid`` double-fork daemon (a new program, without the
action's marker variable) that keeps rewriting them and ``results.json``/``report.md``/the
payload after the action is gone."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from observer_ci.github.sticky import MARKER
from observer_ci.report.escape import escape_text
from tests.end_to_end.test_action import parse_outputs
from tests.support import REPO_ROOT

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="Linux only: the subreaper and /proc (elsewhere only the process group is killed)",
)

STEP_FILES = {
    "GITHUB_OUTPUT": "set_output_5f0c",
    "GITHUB_ENV": "set_env_5f0c",
    "GITHUB_PATH": "add_path_5f0c",
    "GITHUB_STATE": "save_state_5f0c",
    "GITHUB_STEP_SUMMARY": "step_summary_5f0c",
    "GITHUB_FUTURE_FILE_COMMAND": "future_5f0c",  # a file command GitHub adds one day
}
FORGED = (
    "status=success-FORGED\nLD_PRELOAD=/tmp/forged.so\n/tmp/forged-bin\n"
    "status<<UNCLOSED_FORGED\nnever closed\n"
)

HOSTILE_SCRIPT = r"""
import glob, json, os, sys, time

FORGED = {forged!r}
report = {{"env": sorted(os.environ), "values": sorted(os.environ.values()), "reached": {{}}}}

def ancestors():
    pid = os.getpid()
    while pid > 1:
        try:
            pid = int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return
        yield pid

def candidates():
    found = {{}}
    for name in glob.glob(os.path.join(os.environ["HINT_DIR"], "*")):
        found[name] = "listing"
    for pid in ancestors():
        try:
            for entry in open(f"/proc/{{pid}}/environ", "rb").read().split(b"\0"):
                key, _, value = entry.decode(errors="replace").partition("=")
                # only this test's files: a CI job's own step files are in some environ too
                if key.startswith("GITHUB_") and value.startswith(os.environ["HINT_DIR"]):
                    found.setdefault(value, f"/proc/{{pid}}/environ")
        except OSError:
            pass
        for fd in glob.glob(f"/proc/{{pid}}/fd/*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(os.environ["HINT_DIR"]):
                found[fd] = f"/proc/{{pid}}/fd"
    return found

def attack(tag):
    for path, how in candidates().items():
        try:
            with open(path, "a") as f:
                f.write(FORGED)
            report["reached"][f"{{how}}:{{os.path.basename(os.path.realpath(path))}}"] = tag
        except OSError:
            pass

def daemon():
    open(os.environ["DAEMON_PID"], "w").write(str(os.getpid()))
    out = os.environ["ACTION_OUT"]
    for _ in range(600):
        attack("daemon")
        for name in ("results.json", "report.md", "payload/payload.json"):
            try:
                open(os.path.join(out, name), "w").write("FORGED by the daemon")
            except OSError:
                pass
        time.sleep(0.1)

if sys.argv[1:] == ["--daemon"]:
    daemon()
    sys.exit(0)
attack("script")
# another inode at GITHUB_ENV's path: the runner would read this one
env_file = glob.glob(os.path.join(os.environ["HINT_DIR"], "set_env_*"))[0]
with open(env_file + ".new", "w") as f:
    f.write("NODE_OPTIONS=--require=/tmp/forged.js\n")
os.replace(env_file + ".new", env_file)
json.dump(report, open(os.environ["REPORT_FILE"], "w"))

if os.fork() == 0:  # the daemon: setsid, fork again, a new program without any marker
    os.setsid()
    if os.fork() == 0:
        env = {{k: v for k, v in os.environ.items() if not k.startswith("OBSERVER_CI")}}
        os.execve(sys.executable, [sys.executable, __file__, "--daemon"], env)
    os._exit(0)
while not os.path.exists(os.environ["DAEMON_PID"]):
    time.sleep(0.05)
time.sleep(0.5)  # the daemon writes while the action runs, too
if os.environ.get("KILL_PARENT"):  # the action, so that it cannot undo the writes
    import signal
    try:
        os.kill(os.getppid(), signal.SIGKILL)
        report["killed"] = os.getppid()
    except OSError:
        pass
    json.dump(report, open(os.environ["REPORT_FILE"], "w"))
"""

INSTALL = (
    'for f in "$HINT_DIR"/*; do printf "status=success-FORGED\\nLD_PRELOAD=/x.so\\n" >> "$f"; '
    'done; env > "$INSTALL_ENV"'
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _digests(paths: list[Path]) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "missing"
        for p in paths
    }


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> dict:
    return run_hostile(tmp_path_factory.mktemp("hostile"))


def run_hostile(tmp: Path, prefix: tuple[str, ...] = (), kill_parent: bool = False) -> dict:
    """The action (``prefix`` + entrypoint.py) against the hostile install and script."""
    commands = tmp / "_runner_file_commands"
    commands.mkdir()
    files = {name: commands / file for name, file in STEP_FILES.items()}
    for path in files.values():
        path.write_text("", encoding="utf-8")
    script = tmp / "hostile.py"
    script.write_text(HOSTILE_SCRIPT.format(forged=FORGED), encoding="utf-8")
    out = tmp / "out"
    event = tmp / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 5}}), encoding="utf-8")
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO_ROOT),
        "OMP_NUM_THREADS": "1",
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(tmp),
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "octo/models",
        **{name: str(path) for name, path in files.items()},
        "INPUT_SCRIPT": str(script),
        "INPUT_INSTALL": INSTALL,
        "INPUT_OUT": str(out),
        "INPUT_DRY_RUN": "true",
        "INPUT_TIMEOUT_MINUTES": "2",
        "HINT_DIR": str(commands),
        "REPORT_FILE": str(tmp / "script-report.json"),
        "INSTALL_ENV": str(tmp / "install-env.txt"),
        "DAEMON_PID": str(tmp / "daemon.pid"),
        "ACTION_OUT": str(out),
        **({"KILL_PARENT": "1"} if kill_parent else {}),
    }
    proc = subprocess.run(
        [*prefix, sys.executable, str(REPO_ROOT / "entrypoint.py")],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    pid_file = tmp / "daemon.pid"
    daemon = int(pid_file.read_text()) if pid_file.is_file() else None
    alive_at_return = daemon is not None and _alive(daemon)
    watched = [*files.values(), out / "results.json", out / "report.md"]
    watched += sorted((out / "payload").glob("*"))
    at_return = _digests(watched)
    time.sleep(2.0)  # a live daemon rewrites every 0.1 s
    return {
        "proc": proc,
        "log": f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}",
        "files": files,
        "out": out,
        "daemon": daemon,
        "alive_at_return": alive_at_return,
        "unchanged": at_return == _digests(watched),
        "script": json.loads((tmp / "script-report.json").read_text(encoding="utf-8")),
        "install_env": (tmp / "install-env.txt").read_text(encoding="utf-8"),
        "commands_dir": str(commands),
    }


def test_the_attacks_were_real(hostile_run):
    reached = hostile_run["script"]["reached"]
    assert hostile_run["proc"].returncode in (0, 1), hostile_run["log"]
    # the script reached every step file by listing their directory, and as root the
    # parent's private descriptors through /proc
    assert {k.split(":")[1] for k in reached if k.startswith("listing:")} == set(
        STEP_FILES.values()
    ), reached
    if os.geteuid() == 0:  # root here: CAP_SYS_PTRACE reads a non-dumpable parent's /proc
        assert any(k.startswith("/proc/") for k in reached), reached
    else:
        print("not root: the parent's /proc/<pid>/fd and environ were rightly unreadable")
    assert hostile_run["daemon"] is not None, hostile_run["log"]


def test_untrusted_processes_get_no_file_command_variable(hostile_run):
    script = hostile_run["script"]
    for name in STEP_FILES:
        assert name not in script["env"]
        assert f"\n{name}=" not in hostile_run["install_env"]
    directory = hostile_run["commands_dir"]
    assert not [v for v in script["values"] if f"{directory}/" in v]
    assert f"{directory}/" not in hostile_run["install_env"]


def test_no_forged_line_reaches_the_step_files_and_the_outputs_are_intact(hostile_run):
    files = hostile_run["files"]
    for name in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_STATE", "GITHUB_FUTURE_FILE_COMMAND"):
        assert files[name].read_bytes() == b"", name  # the action writes none of them
        assert not files[name].is_symlink()
    outputs = parse_outputs(files["GITHUB_OUTPUT"].read_text(encoding="utf-8"))  # strict
    expected = "failure" if hostile_run["proc"].returncode == 1 else "success"
    assert outputs["status"] == expected, outputs
    assert outputs["comment_status"] == "dry-run"
    assert outputs["results_path"] == str(hostile_run["out"] / "results.json")
    summary = files["GITHUB_STEP_SUMMARY"].read_text(encoding="utf-8")
    assert summary.startswith(MARKER), summary[:300]
    assert summary == (hostile_run["out"] / "report.md").read_text(encoding="utf-8") + "\n"
    for path in files.values():
        assert "FORGED" not in path.read_text(encoding="utf-8"), path
    # the undoing is said in the job log and in the report
    assert "wrote to this step's GITHUB_OUTPUT" in hostile_run["proc"].stdout
    report = (hostile_run["out"] / "report.md").read_text(encoding="utf-8")
    for name in STEP_FILES:
        assert escape_text(f"wrote to this step's {name} file") in report, name
    assert escape_text("process(es) running after its phase") in report


def test_the_daemon_is_dead_when_the_action_returns_and_nothing_changes_after(hostile_run):
    assert not hostile_run["alive_at_return"], hostile_run["daemon"]
    assert hostile_run["unchanged"]
    out = hostile_run["out"]
    for path in (out / "results.json", out / "report.md", *(out / "payload").glob("*")):
        assert "FORGED" not in path.read_text(encoding="utf-8"), path
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [m["name"] for m in results["models"]] == ["hostile"], results["models"]


def _pid_namespaces() -> str:
    """Why the action cannot run as PID 1 of a PID namespace here, or ""."""
    try:
        probe = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no unshare: {e}"
    return "" if probe.returncode == 0 else f"unshare --pid refused: {probe.stderr[-200:]!r}"


def test_as_pid_1_like_the_docker_variant_the_action_cannot_be_killed_from_inside(tmp_path):
    # the Docker variant's action is PID 1 of its container: SIGKILL from inside is ignored,
    # so the pull request's code cannot kill it between its writes and their undoing
    why = _pid_namespaces()
    if why:
        print(f"not run: {why}")
        pytest.skip(why)
    run = run_hostile(tmp_path, ("unshare", "--pid", "--fork", "--mount-proc"), kill_parent=True)
    assert run["proc"].returncode in (0, 1), run["log"]
    assert run["script"]["killed"] == 1, run["script"]  # SIGKILL sent to the action, PID 1
    files = run["files"]
    for path in files.values():
        assert "FORGED" not in path.read_text(encoding="utf-8"), path
    outputs = parse_outputs(files["GITHUB_OUTPUT"].read_text(encoding="utf-8"))
    assert outputs["status"] in ("success", "failure") and outputs["comment_status"] == "dry-run"
    assert run["unchanged"]  # (the daemon's pid is the namespace's: its end is the kernel's)
