"""One typed config across the process boundary: the parent's RunOptions file and the
command line's flags build the same object; the file is read strictly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from observer_ci.action.child_run import CONFIG_NAME, child_command
from observer_ci.action.settings import Settings
from observer_ci.action.workspace import child_options
from observer_ci.cli import build_parser, main, run_options
from observer_ci.core.run_options import RunOptions, RunOptionsError

# a non-default value for every option, as flags
FLAGS = [
    "a.py",
    "b/*.py",
    "--out=o",
    "--label=base",
    "--baseline=base.json",
    "--thresholds=abs_max=0.5",
    "--fail-on=all",
    "--atol=0.25",
    "--rtol=0.125",
    "--warmup=0",
    "--repeat=3",
    "--verbose",
    "--no-probe",
    "--no-merged-decoder",
    "--cache-dir=c",
    "--cache-max-mb=7",
    "--threads=2",
    "--save-feeds",
    "--reverse-order",
    "--no-gate",
    "--journal=j.jsonl",
    "--policy=p.yml",
    "--bundles=all",
    "--history-runs=5",
    "--variants=fp16",
    "--providers=cpu,cuda",
    "--missing-scripts=row",
    "--no-summary",
]


def options_of(argv: list[str]) -> RunOptions:
    return run_options(build_parser().parse_args(["run", *argv]))


def test_every_option_has_a_flag_and_the_file_gives_the_same_object(tmp_path: Path) -> None:
    from_flags = options_of(FLAGS)
    changed = [
        f.name
        for f in dataclasses.fields(RunOptions)
        if getattr(from_flags, f.name) == getattr(RunOptions(), f.name)
    ]
    assert changed == []  # a field without a flag would keep its default
    path = from_flags.write(tmp_path / "options.json")
    assert options_of(["--config", str(path)]) == from_flags


def test_the_parent_hands_its_settings_over_as_one_file(tmp_path: Path) -> None:
    env = {
        "INPUT_SCRIPT": "a.py",
        "INPUT_CACHE_DIR": ".c",
        "INPUT_CACHE_MAX_MB": "64",
        "INPUT_REPEAT": "4",
        "INPUT_THRESHOLDS": "abs_max=0.001,rel_max=0.02",
        "INPUT_VERBOSE": "true",
        "GITHUB_WORKSPACE": str(tmp_path),
    }
    shared = child_options(Settings.from_env(env), threads=3)
    assert shared["extra_env"]["OMP_NUM_THREADS"] == "3"
    journal = tmp_path / "journal.jsonl"
    cmd = child_command(shared["options"], ["a.py"], tmp_path, "head", journal)
    assert cmd[-3:] == ["run", "--config", str(tmp_path / CONFIG_NAME)]  # no re-encoded flags
    told = options_of(cmd[-2:])
    assert told == RunOptions(
        scripts=("a.py",),
        out=str(tmp_path),
        label="head",
        atol=0.001,
        rtol=0.02,
        repeat=4,
        verbose=True,
        cache_dir=str((tmp_path / ".c").resolve()),
        cache_max_mb=64,
        threads=3,
        gate=False,
        journal=str(journal),
        missing_scripts="row",  # the parent checked the head's paths; base may lack one
        print_summary=False,  # the parent says what it wrote
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1]", "must be a JSON object"),
        ("{oops", "not JSON"),
        ('{"repeats": 3}', "unknown run option(s): repeats"),
        ('{"repeat": "3"}', "'repeat' must be int"),
        ('{"verbose": 1}', "'verbose' must be bool"),
        ('{"cache_max_mb": true}', "'cache_max_mb' must be int or null"),
        ('{"cache_max_mb": -1}', "--cache-max-mb must be >= 0"),
        ('{"atol": -0.5}', "--atol must be >= 0"),
        ('{"scripts": ["a.py", 3]}', "'scripts' must be a list of paths"),
    ],
)
def test_a_malformed_options_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "options.json"
    path.write_text(content, encoding="utf-8")
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "x.json", "a.py"], "--config holds the whole run"),
        (["--config", "x.json", "--repeat", "3"], "--config holds the whole run"),
        (["--config", "missing.json"], "missing.json could not be read"),
        ([], "give observation scripts"),
    ],
)
def test_config_is_the_whole_run_or_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    RunOptions(scripts=("a.py",)).write(tmp_path / "x.json")
    assert main(["run", *argv]) == 2
    assert message in capsys.readouterr().err


def test_options_round_trip_through_json_and_integers_read_as_tolerances() -> None:
    options = RunOptions(scripts=("a.py",), atol=1e-7, rtol=0.3, cache_max_mb=0)
    assert RunOptions.from_json(json.loads(json.dumps(options.to_json()))) == options
    assert RunOptions.from_json({"atol": 0}).atol == 0.0
    with pytest.raises(RunOptionsError):
        RunOptions(threads="2")  # type: ignore[arg-type]


def test_the_child_config_comes_from_the_options_and_the_cache_variables() -> None:
    from observer_ci.pipeline.config import RunConfig
    from observer_ci.report.rules import Thresholds

    options = RunOptions(warmup=0, repeat=3, probe=False, cache_max_mb=5, save_feeds=True)
    config = RunConfig.from_options(options, Thresholds(abs_max=0.5, rel_max=0.25))
    assert (config.atol, config.rtol, config.warmup, config.repeat) == (0.5, 0.25, 0, 3)
    assert not config.probe and config.save_feeds and config.merge_decoders
    assert config.cache_max_bytes == 5 << 20 and config.cache_dir is None
