"""Issue 7, the pure parts: annotations that carry no control or bidi characters, the
stop-commands guard, secret-looking names, bad baselines, long model names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from observer_ci.action.isolation import is_secret_name, without_secrets
from observer_ci.action.settings import Settings, SettingsError
from observer_ci.action.workspace import load_baseline
from observer_ci.core import workflow_commands as workflow


def test_annotation_titles_and_messages_lose_control_and_bidi_characters(capsys):
    hostile = "model\x1b[31m\x00\u202eevil\u2066x\u200b\r\n::add-mask::secret"
    workflow.command("error", hostile, title=f"observer-ci: {hostile}")
    (line,) = capsys.readouterr().out.splitlines()
    for bad in ("\x1b", "\x00", "\u202e", "\u2066", "\u200b", "\r"):
        assert bad not in line
    assert line.startswith("::error title=observer-ci%3A model[31mevilx%0D%0A%3A%3Aadd-mask")
    assert line.endswith("::model[31mevilx%0D%0A::add-mask::secret")


def test_the_guard_is_shared_and_holds_our_annotations_until_it_closes(capsys):
    with workflow.commands_stopped():
        workflow.forward_untrusted(b"::error::forged\nno newline")
        with workflow.commands_stopped():  # nested (or another thread): same guard
            workflow.command("warning", "ours")
        workflow.forward_untrusted(b" still inside")
    lines = capsys.readouterr().out.split("\n")
    token = lines[0].removeprefix("::stop-commands::")
    assert len(token) == 32 and lines[0] != token
    assert lines[1:5] == [
        "::error::forged",
        "no newline still inside",  # the resume line starts on a line of its own
        f"::{token}::",
        "::warning title=observer-ci::ours",  # emitted once commands work again
    ]
    with pytest.raises(RuntimeError):
        workflow.forward_untrusted(b"outside")


def test_secret_looking_names_are_removed_for_repository_code():
    env = {
        "INPUT_TOKEN": "a",
        "GITHUB_TOKEN": "b",
        "ACTIONS_RUNTIME_TOKEN": "c",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "d",
        "ACTIONS_ID_TOKEN_REQUEST_URL": "e",
        "ACTIONS_RUNTIME_URL": "f",
        "AWS_SECRET_ACCESS_KEY": "g",
        "HF_TOKEN": "h",
        "TOKENIZERS_PARALLELISM": "false",
        "PATH": "/usr/bin",
        "GITHUB_SHA": "abc",
    }
    assert without_secrets(env) == {
        "TOKENIZERS_PARALLELISM": "false",
        "PATH": "/usr/bin",
        "GITHUB_SHA": "abc",
    }
    assert is_secret_name("INPUT_GITHUB_TOKEN") and not is_secret_name("GITHUB_REPOSITORY")


@pytest.mark.parametrize(
    "models", [[{"bogus": 1}], "abc", [1], [{"name": 3, "script": "s", "status": "ok"}]]
)
def test_a_malformed_baseline_is_a_note_never_a_crash(tmp_path, models):
    path = tmp_path / "base.json"
    path.write_text(json.dumps({"schema_version": 1, "models": models}))
    settings = Settings(scripts=["x.py"], baseline=str(path))
    notes: list[str] = []
    assert load_baseline(settings, tmp_path, notes) is None
    (note,) = notes
    assert "could not be read" in note and "regenerate" in note


def test_a_very_long_model_name_gets_a_short_hashed_file_name(tmp_path):
    pytest.importorskip("torch")
    from observer_ci.pipeline.family_server import MAX_FILENAME_CHARS, safe_filename

    long_a, long_b = "m" * 300 + "a", "m" * 300 + "b"
    name_a, name_b = safe_filename(long_a), safe_filename(long_b)
    assert len(name_a) <= MAX_FILENAME_CHARS and name_a != name_b
    assert safe_filename(long_a) == name_a  # stable
    (tmp_path / f"{name_a}.onnx.data").write_bytes(b"ok")  # the file system takes it
    assert safe_filename("short name") == "short_name"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("INPUT_TIMEOUT_MINUTES", "inf", "timeout_minutes"),
        ("INPUT_TIMEOUT_MINUTES", "1e9", "timeout_minutes"),
        ("INPUT_REPEAT", str(10**12), "at most"),
    ],
)
def test_absurd_numbers_are_input_errors(name, value, message):
    with pytest.raises(SettingsError, match=message):
        Settings.from_env({"INPUT_SCRIPT": "x.py", name: value})


def test_make_undumpable_is_harmless_in_a_child(tmp_path):
    # the flag hides /proc/<pid>/environ from processes without CAP_SYS_PTRACE
    script = (
        "from observer_ci.action.isolation import make_undumpable\n"
        "import sys\n"
        "sys.exit(0 if make_undumpable() else 1)\n"
    )
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ}, timeout=60)
    expected = 0 if Path("/proc").is_dir() else 1
    assert proc.returncode == expected
