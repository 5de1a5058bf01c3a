"""Script paths and globs resolve once, before anything runs; every mistake is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from observer_ci.core.script_paths import ScriptPathError, resolve_scripts, script_problem


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in ("b.py", "a.py", "notes.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "models").mkdir()
    (tmp_path / "models.d").mkdir()
    return tmp_path


def test_globs_expand_sorted_and_each_script_once(workspace: Path) -> None:
    assert resolve_scripts(["*.py", "a.py"], workspace) == ["a.py", "b.py"]


def test_every_mistake_is_named_in_one_error(workspace: Path) -> None:
    with pytest.raises(ScriptPathError) as e:
        resolve_scripts(["a.py", "missing.py", "gone/*.py", "models", "models*"], workspace)
    text = str(e.value)
    assert "'missing.py': no such file" in text
    assert "the glob 'gone/*.py' matched no file" in text
    assert "'models' is a directory, not a script: give the scripts in it ('models/*.py')" in text
    assert "the glob 'models*' matched no readable file, only: models, models.d" in text
    assert "a.py" not in text.replace("'models/*.py'", "")  # the good one is not blamed


def test_not_strict_keeps_what_matched_nothing_for_its_run_to_report(workspace: Path) -> None:
    assert resolve_scripts(["gone/*.py", "a.py"], workspace, strict=False) == ["gone/*.py", "a.py"]


def test_an_unreadable_file_is_named_with_why() -> None:
    mem = Path("/proc/self/mem")  # a regular file that even root cannot read from offset 0
    if not mem.is_file():
        pytest.skip("needs Linux's /proc/self/mem for a file root cannot read")
    problem = script_problem(str(mem))
    assert problem is not None and problem.startswith("'/proc/self/mem' cannot be read: ")
