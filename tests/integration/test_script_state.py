"""Each observation script starts in the same working directory, environment and ``sys.path``
(umask, signal handlers, recursion limit too, no interval timer left armed), whatever an
earlier script did (``os.chdir``, ``sys.path.insert``, ``os.environ[...]``, ``setitimer``):
two real scripts in a real ``observer-ci run`` child."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from observer_ci.core.results import RunResults
from tests.support import REPO_ROOT

MESSY = """
import os, sys
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "deeper"))
sys.path.insert(0, "/planted/by/the/first/script")
os.environ["PLANTED_BY_FIRST"] = "1"
os.environ.pop("KEPT_FOR_ALL", None)
sys.stdout = open(os.devnull, "w")
import signal
os.umask(0o077)
signal.signal(signal.SIGTERM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.5)  # SIGALRM kills the process unless disarmed
sys.setrecursionlimit(123456)
"""

LOOKS = """
import json, os, sys
state = {
    "cwd": os.getcwd(),
    "planted_path": "/planted/by/the/first/script" in sys.path,
    "planted_env": os.environ.get("PLANTED_BY_FIRST"),
    "kept_env": os.environ.get("KEPT_FOR_ALL"),
    "getenv_c": os.getenv("PLANTED_BY_FIRST"),
    "stdout_is_devnull": getattr(sys.stdout, "name", "") == os.devnull,
}
import signal, time
time.sleep(1.0)  # an alarm left armed by the first script would fire now
state["umask"] = os.umask(0o022)
state["sigterm_default"] = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
state["recursion_limit_changed"] = sys.getrecursionlimit() == 123456
with open(os.environ["STATE_FILE"], "w") as f:
    json.dump(state, f)
"""


def test_a_script_that_changes_directory_path_and_environment_does_not_reach_the_next(tmp_path):
    work = tmp_path / "work"
    (work / "observe" / "deeper").mkdir(parents=True)
    (work / "observe" / "messy.py").write_text(MESSY, encoding="utf-8")
    (work / "observe" / "looks.py").write_text(LOOKS, encoding="utf-8")
    state_file = tmp_path / "state.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "STATE_FILE": str(state_file),
        "KEPT_FOR_ALL": "yes",
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        # relative paths and a relative --out: both depend on the working directory
        [sys.executable, "-m", "observer_ci", "run", "observe/messy.py", "observe/looks.py"]
        + ["--out", "out", "--fail-on", "none"],
        cwd=work,
        env=env,
        preexec_fn=lambda: os.umask(0o022),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert state_file.is_file(), proc.stdout + proc.stderr  # the second script was found
    state = json.loads(state_file.read_text(encoding="utf-8"))
    assert state == {
        "cwd": str(work),
        "planted_path": False,
        "planted_env": None,
        "kept_env": "yes",
        "getenv_c": None,
        "stdout_is_devnull": False,
        "umask": 0o022,
        "sigterm_default": True,
        "recursion_limit_changed": False,
    }
    results = RunResults.read(work / "out" / "results.json")  # written where it was asked
    errors = {m.script: m.error or "" for m in results.models}
    assert list(errors) == ["observe/messy.py", "observe/looks.py"], errors
    assert all("observed no model" in e for e in errors.values()), errors
    assert not (work / "observe" / "deeper" / "out").exists()
