"""``observer_ci.action.step_files``: which variables are step files, and putting each file
back whatever was done to it (real files: appended, truncated, chmod 000, replaced by a
symlink, a directory or another inode, deleted)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from observer_ci.action import step_files


def commands(tmp_path: Path) -> dict[str, str]:
    directory = tmp_path / "_runner_file_commands"
    directory.mkdir()
    env = {}
    for name in (*step_files.FILE_COMMAND_NAMES, "GITHUB_NEW_COMMAND"):
        path = directory / f"{name.lower()}_1234"
        path.write_text("ours\n" if name == "GITHUB_STEP_SUMMARY" else "", encoding="utf-8")
        env[name] = str(path)
    return env


def test_the_class_is_every_file_command_and_every_mention_of_one(tmp_path):
    env = commands(tmp_path)
    elsewhere = tmp_path / "event.json"
    elsewhere.write_text("{}", encoding="utf-8")
    env.update(
        GITHUB_EVENT_PATH=str(elsewhere),  # not in the file-commands directory: kept
        GITHUB_WORKSPACE=str(tmp_path),
        COPY_OF_OUTPUT=f"x:{env['GITHUB_OUTPUT']}",  # mentions one: dropped
        HOME=str(tmp_path / "home"),
    )
    assert set(step_files.file_command_paths(env)) == {
        *step_files.FILE_COMMAND_NAMES,
        "GITHUB_NEW_COMMAND",
    }
    kept = step_files.without_file_commands(env)
    assert set(kept) == {"GITHUB_EVENT_PATH", "GITHUB_WORKSPACE", "HOME"}


def _replace_by_symlink(path: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("status=success-FORGED\n", encoding="utf-8")
    path.unlink()
    path.symlink_to(target)


def _replace_by_directory(path: Path, tmp_path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "x").write_text("FORGED", encoding="utf-8")


def _replace_by_inode(path: Path, tmp_path: Path) -> None:
    new = path.with_suffix(".new")
    new.write_text("LD_PRELOAD=/x.so\n", encoding="utf-8")
    os.replace(new, path)


def _chmod_000_and_append(path: Path, tmp_path: Path) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("status<<EOF\nunclosed\n")
    path.chmod(0)


def _chmod_000_the_directory(path: Path, tmp_path: Path) -> None:
    path.parent.chmod(0)


def _truncate(path: Path, tmp_path: Path) -> None:
    path.write_text("", encoding="utf-8")


def _delete(path: Path, tmp_path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize(
    "attack",
    [
        _replace_by_symlink,
        _replace_by_directory,
        _replace_by_inode,
        _chmod_000_and_append,
        _chmod_000_the_directory,
        _truncate,
        _delete,
    ],
)
def test_each_file_is_put_back_as_the_action_left_it(tmp_path, attack):
    env = commands(tmp_path)
    modes = {name: stat.S_IMODE(Path(value).stat().st_mode) for name, value in env.items()}
    dir_mode = stat.S_IMODE(Path(env["GITHUB_OUTPUT"]).parent.stat().st_mode)
    with step_files.guarded(env):
        for value in env.values():
            attack(Path(value), tmp_path)
    for name, value in env.items():
        path = Path(value)
        assert not path.is_symlink() and path.is_file(), name
        expected = "ours\n" if name == "GITHUB_STEP_SUMMARY" else ""
        assert path.read_text(encoding="utf-8") == expected, name
        assert stat.S_IMODE(path.stat().st_mode) == modes[name], name
        assert stat.S_IMODE(path.parent.stat().st_mode) == dir_mode
    # the action writes after the phase, by path, and that is kept by the next phase
    with open(env["GITHUB_OUTPUT"], "a", encoding="utf-8") as f:
        f.write("status=success\n")
    with step_files.guarded(env), open(env["GITHUB_OUTPUT"], "a", encoding="utf-8") as f:
        f.write("status=success-FORGED\n")
    assert Path(env["GITHUB_OUTPUT"]).read_text(encoding="utf-8") == "status=success\n"


def test_what_is_not_a_regular_file_is_left_alone_and_what_was_absent_stays_absent(tmp_path):
    directory, absent = tmp_path / "a-directory", tmp_path / "absent"
    directory.mkdir()
    (directory / "inside").write_text("kept", encoding="utf-8")
    env = {"GITHUB_OUTPUT": str(directory), "GITHUB_ENV": str(absent)}
    with step_files.guarded(env):
        absent.write_text("LD_PRELOAD=/x.so\n", encoding="utf-8")
    assert (directory / "inside").read_text(encoding="utf-8") == "kept"
    assert not absent.exists()
