"""Command line (compare / merge / usage errors) and action settings, on crafted results."""

from __future__ import annotations

import pytest

from observer_ci.action.settings import Settings, SettingsError
from observer_ci.cli import expand_scripts, main
from observer_ci.core.results import RunResults
from observer_ci.core.workflow_commands import render_cut, workflow_escape
from observer_ci.report.rules import RULES
from tests.support.builders import export, model, observation, run


def results(label: str, abs_: float, nodes: int = 10, name: str = "m") -> RunResults:
    calls = [observation(0, abs_=abs_, rel=abs_)]
    one = model(name, export=export(node_count=nodes), observations=calls)
    return run(one, label=label, env={"torch": "2.13.0"})


def test_compare_exit_codes_follow_the_gate(tmp_path, capsys):
    base = results("base", 1e-6).write(tmp_path / "base.json")
    same = results("head", 1e-6).write(tmp_path / "same.json")
    worse = results("head", 1e-4).write(tmp_path / "worse.json")  # x100, still under abs_max
    assert main(["compare", str(base), str(same)]) == 0
    assert main(["compare", str(base), str(worse)]) == 1
    assert "FAIL  m: abs_growth" in capsys.readouterr().out
    assert main(["compare", str(base), str(worse), "--fail-on", "none"]) == 0


def test_compare_writes_report_but_not_results(tmp_path):
    base = results("base", 1e-7).write(tmp_path / "base.json")
    head = results("head", 1e-7, nodes=30).write(tmp_path / "head.json")
    out = tmp_path / "out"
    assert main(["compare", str(base), str(head), "--out", str(out)]) == 0  # node growth warns
    report = (out / "report.md").read_text()
    assert report.startswith("<!-- observer-ci:sticky-comment -->")
    assert "node_count_growth" in report
    assert not (out / "results.json").exists()


def test_merge_combines_matrix_parts(tmp_path):
    a = results("py310", 1e-7).write(tmp_path / "a.json")
    b = results("py311", 1e-7).write(tmp_path / "b.json")
    out = tmp_path / "merged"
    assert main(["merge", str(a), str(b), "--out", str(out)]) == 0
    merged = RunResults.read(out / "results.json")
    assert sorted(m.name for m in merged.models) == ["m [py310]", "m [py311]"]
    assert (out / "report.md").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "nope.json", "nope2.json"], "nope.json: no such file"),
        (["run", "x.py", "--fail-on", "bogus"], "bogus"),
        (["run", "x.py", "--thresholds", "abs_max=abc"], "abs_max"),
        (["run", "x.py", "--cache-max-mb", "2GB"], "--cache-max-mb"),
    ],
)
def test_usage_errors_exit_2_with_a_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_wrong_schema_version_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "old.json"
    path.write_text('{"schema_version": 999, "models": []}')
    assert main(["compare", str(path), str(path)]) == 2
    assert "schema_version 999" in capsys.readouterr().err


def test_expand_scripts_keeps_unmatched_patterns_for_reporting(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert expand_scripts(["*.py", "a.py", "missing/*.py"]) == ["a.py", "b.py", "missing/*.py"]


def test_settings_from_env_parses_inputs_and_hides_the_token():
    env = {
        "INPUT_SCRIPT": "observe/a.py 'observe/b c.py'",
        "INPUT_COMMENT": "false",
        "INPUT_FAIL_ON": "all",
        "INPUT_TOKEN": "ghs_secret",
        "INPUT_REPEAT": "3",
        "GITHUB_API_URL": "http://127.0.0.1:1/",
        "GITHUB_REPOSITORY": "octo/models",
        "GITHUB_RUN_ID": "42",
    }
    s = Settings.from_env(env)
    assert s.scripts == ["observe/a.py", "observe/b c.py"]
    assert s.comment is False and s.fail_on == frozenset(RULES) and s.repeat == 3
    assert s.github_api_url == "http://127.0.0.1:1"
    assert s.run_url == "https://github.com/octo/models/actions/runs/42"
    assert "ghs_secret" not in repr(s)


@pytest.mark.parametrize(
    "env, message",
    [
        ({}, "input 'script' is required"),
        ({"INPUT_SCRIPT": "a.py", "INPUT_COMMENT": "maybe"}, "'comment' must be true or false"),
        ({"INPUT_SCRIPT": "a.py", "INPUT_REPEAT": "ten"}, "'repeat' must be an integer"),
        ({"INPUT_SCRIPT": "a.py", "INPUT_TIMEOUT_MINUTES": "inf"}, "'timeout_minutes' must be"),
        ({"INPUT_SCRIPT": "a.py", "INPUT_TIMEOUT_MINUTES": "1e9"}, "'timeout_minutes' must be"),
        ({"INPUT_SCRIPT": "a.py", "INPUT_TIMEOUT_MINUTES": "nan"}, "'timeout_minutes' must be"),
        ({"INPUT_SCRIPT": "a.py", "INPUT_THRESHOLDS": "abs_max=x"}, "is not a number"),
        ({"INPUT_SCRIPT": "a.py", "INPUT_FAIL_ON": "bogus"}, "unknown fail-on rule"),
        ({"INPUT_SCRIPT": "a.py", "INPUT_CACHE_MAX_MB": "-1"}, "'cache_max_mb' must be"),
    ],
)
def test_settings_errors_are_clear(env, message):
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_workflow_command_escaping_cannot_inject_a_second_command():
    text = "boom\n::error::injected 100%"
    escaped = workflow_escape(text)
    assert "\n" not in escaped and escaped.startswith("boom%0A::error::injected 100%25")
    assert workflow_escape("a:b,c", prop=True) == "a%3Ab%2Cc"


def test_summary_cut_respects_the_byte_limit():
    report = "é" * 2000
    cut = render_cut(report, 1000)
    assert len(cut.encode("utf-8")) <= 1000 and cut.endswith("report.md.\n")


def test_the_cache_size_cap_reaches_the_run_from_input_flag_or_variable():
    from observer_ci.action.workspace import child_options
    from observer_ci.pipeline.export_cache import CACHE_MAX_MB_ENV, resolve_cache_max_bytes

    env = {"INPUT_SCRIPT": "a.py", "INPUT_CACHE_DIR": ".c", "INPUT_CACHE_MAX_MB": "64"}
    settings = Settings.from_env(env)
    assert settings.cache_max_mb == 64
    assert child_options(settings)["options"].cache_max_mb == 64
    unset = Settings.from_env({"INPUT_SCRIPT": "a.py", "INPUT_CACHE_DIR": ".c"})
    assert unset.cache_max_mb is None and child_options(unset)["options"].cache_max_mb is None
    mb = 1 << 20
    assert resolve_cache_max_bytes("64", env={}) == 64 * mb  # the flag
    assert resolve_cache_max_bytes(None, env={CACHE_MAX_MB_ENV: "3"}) == 3 * mb
    assert resolve_cache_max_bytes("5", env={CACHE_MAX_MB_ENV: "3"}) == 5 * mb  # flag first
    assert resolve_cache_max_bytes(None, env={}) == 2048 * mb  # the documented default
    assert resolve_cache_max_bytes("0", env={}) is None  # no cap
