"""The action runs scripts in child processes: a hang, ``os._exit``, a SIGKILL (what the
OOM killer sends) or a corrupted results file loses only the rows of the script at fault."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from observer_ci.action.settings import Settings
from observer_ci.action.workspace import run_scripts_subprocess
from observer_ci.core.results import STATUS_SCRIPT_FAILED

SCRIPTS = {
    "first": "raise ValueError('first script: its own error')\n",
    "exits": "import os\nos._exit(7)\n",
    "oom": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "hangs": (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "open({pid_file!r}, 'w').write(str(child.pid))\n"
        "print('::error::forged by the script', flush=True)\n"
        "time.sleep(600)\n"
    ),
    "garbage": (
        "import atexit\n"
        "atexit.register(lambda: open({results!r}, 'w').write('{{not json'))\n"
        "raise ValueError('garbage script: its own error')\n"
    ),
    "last": "raise ValueError('last script: its own error')\n",
}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie is dead, only not reaped yet


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to check the grandchild")
def test_each_crash_loses_only_its_own_rows_and_a_hang_is_killed_with_its_children(tmp_path, capfd):
    out = tmp_path / "out"
    pid_file = tmp_path / "grandchild.pid"
    paths = []
    for name, text in SCRIPTS.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text.format(pid_file=str(pid_file), results=str(out / "results.json")))
        paths.append(str(path))
    notes: list[str] = []
    settings = Settings(scripts=[], workspace=str(tmp_path), repeat=1, timeout_minutes=0.05)
    begin = time.perf_counter()
    results = run_scripts_subprocess(paths, out, label="head", settings=settings, notes=notes)
    elapsed = time.perf_counter() - begin

    rows = {m.name: m for m in results.models}
    assert list(rows) == list(SCRIPTS), rows  # one row per script, in order
    assert all(m.status == STATUS_SCRIPT_FAILED for m in results.models)
    assert "first script: its own error" in rows["first"].error
    assert "exited with 7 while running" in rows["exits"].error
    assert "killed by SIGKILL while running" in rows["oom"].error
    assert "out-of-memory" in rows["oom"].error
    assert "did not finish within timeout_minutes=0.05" in rows["hangs"].error
    assert "garbage script: its own error" in rows["garbage"].error
    assert "last script: its own error" in rows["last"].error
    # the corrupted results.json is a warning, and the rows came from the journal
    assert any("results.json was missing or unreadable" in n for n in notes), (notes, results)
    assert any("results.json unreadable" in n for n in notes), notes
    # the hung script's own child process was killed with it
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)
    # the scripts' output reached the job log, inside a stop-commands guard
    stdout = capfd.readouterr().out
    forged = stdout.index("::error::forged by the script")
    opening = stdout.rindex("::stop-commands::", 0, forged)
    token = stdout[opening:].split("\n", 1)[0].split("::")[2]
    assert len(token) >= 32
    assert stdout.index(f"::{token}::", forged) > forged
    assert elapsed < 120
    print(f"5 crashes and recoveries in {elapsed:.1f}s")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to check the child")
def test_a_cancelled_action_takes_its_running_child_along(tmp_path):
    # the runner cancels a job with SIGTERM; the child runs in its own process group, so
    # without unwinding it would be left running
    pid_file = tmp_path / "child.pid"
    child = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    )
    parent = (
        "import os, sys\n"
        "from observer_ci.action.main import exit_on_sigterm\n"
        "from observer_ci.action.workspace import run_isolated\n"
        "exit_on_sigterm()\n"
        f"run_isolated([sys.executable, '-c', {child!r}], cwd='.', env=dict(os.environ),"
        " timeout_s=600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 5
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child_pid)


DAEMON_CHILD = """
import os, sys, time
open(CHILD_PID, "w").write(str(os.getpid()))
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OBSERVER_CI")}
        os.execve(sys.executable, [sys.executable, "-c", DAEMON], env)
    os._exit(0)
time.sleep(600)
"""
DAEMON = "import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(600)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")
@pytest.mark.parametrize("cancelled", [False, True], ids=["finished", "cancelled"])
def test_a_setsid_double_fork_daemon_dies_with_its_phase(tmp_path, cancelled):
    # the daemon leaves the child's session and process group, its parent chain (double
    # fork) and the marker variable (a new program without it): the subreaper still has it
    pid_file, child_pid = tmp_path / "daemon.pid", tmp_path / "child.pid"
    child = f"DAEMON = {DAEMON.format(pid_file=str(pid_file))!r}\n" + DAEMON_CHILD
    child = f"CHILD_PID = {str(child_pid)!r}\n" + child
    run = f"run_isolated([sys.executable, '-c', {child!r}], cwd='.', env=dict(os.environ),"
    parent = (
        "import os, sys, threading, time\n"
        "from observer_ci.action import reaper\n"
        "from observer_ci.action.main import exit_on_sigterm\n"
        "from observer_ci.action.workspace import run_isolated\n"
        "exit_on_sigterm()\n"
        "assert reaper.arm()\n"
    )
    if cancelled:  # as base (a worker thread) and head (the main thread) run side by side
        parent += (
            f"threading.Thread(target=lambda: {run} timeout_s=600), daemon=True).start()\n"
            "run_isolated([sys.executable, '-c', 'import time; time.sleep(600)'], cwd='.',"
            " env=dict(os.environ), timeout_s=600)\n"
        )
    else:  # the action goes on after the phase (posting...): the daemon must be dead already
        parent += f"{run} timeout_s=3)\nprint('returned', flush=True)\ntime.sleep(600)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        daemon = int(pid_file.read_text())
        assert _alive(daemon)
        if cancelled:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 128 + signal.SIGTERM
        else:
            while "returned" not in (line := proc.stdout.readline()):  # type: ignore[union-attr]
                assert line, "the parent ended before run_isolated returned"
        assert not _alive(daemon)
        assert not _alive(int(child_pid.read_text()))  # the phase's own child too
    finally:
        proc.kill()
        proc.wait()
