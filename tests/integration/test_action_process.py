"""The action runs scripts in a child process: a hang or a hard crash is a result row."""

import time

from observer_ci.results import STATUS_SCRIPT_FAILED
from observer_ci.settings import Settings
from observer_ci.workspace import run_scripts_subprocess


def settings(tmp_path, **kwargs) -> Settings:
    return Settings(scripts=[], workspace=str(tmp_path), repeat=1, **kwargs)


def test_a_script_that_hangs_is_stopped_and_reported(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(600)\n")
    begin = time.perf_counter()
    results = run_scripts_subprocess(
        [str(script)],
        tmp_path / "out",
        label="head",
        settings=settings(tmp_path, timeout_minutes=0.1),
    )
    assert time.perf_counter() - begin < 60
    (row,) = results.models
    assert row.status == STATUS_SCRIPT_FAILED
    assert "timeout_minutes=0.1" in row.error


def test_a_script_that_kills_the_process_is_reported(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import os\nos._exit(7)\n")
    results = run_scripts_subprocess(
        [str(script)], tmp_path / "out", label="head", settings=settings(tmp_path)
    )
    (row,) = results.models
    assert row.status == STATUS_SCRIPT_FAILED
    assert "exited with 7 before writing results" in row.error
