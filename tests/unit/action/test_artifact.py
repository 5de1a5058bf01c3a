"""The payload's round trip and validation, the new settings, and keyed markers."""

from __future__ import annotations

import dataclasses

import pytest

from observer_ci.action.artifact import (
    ArtifactError,
    NoPayloadError,
    Payload,
    parse_payload,
    parse_results,
    read_parts,
    write_payload,
)
from observer_ci.action.settings import Settings, SettingsError
from observer_ci.core.results import ProbeResult, RunResults
from observer_ci.github.sticky import MARKER, parse_marker, sticky_marker, with_marker
from observer_ci.report.rules import Thresholds
from tests.support.builders import model, observation, run

SHA = "c" * 40


def a_run() -> RunResults:
    probe = ProbeResult(ran=True, ok=True, success=False, abs=float("nan"), shapes={"x": [7, 3]})
    obs = observation(0, abs_=0.0, rel=float("inf"))  # non-finite values survive the trip
    return run(model(observations=[obs], probe=probe), env={"torch": "2.13.0"})


def a_payload(**changes) -> Payload:
    base = Payload(
        pr_number=3,
        head_sha=SHA,
        run_id="12",
        comment_key="vision",
        label="linux",
        thresholds=Thresholds(abs_max=2e-3),
        fail_on=frozenset({"export_failed", "discrepancy"}),
    )
    return dataclasses.replace(base, **changes)


def test_a_written_payload_reads_back_the_same(tmp_path):
    head, base = a_run(), a_run()
    write_payload(tmp_path / "p", a_payload(), head, base)
    (part,) = read_parts(tmp_path / "p")
    assert part.payload == a_payload()
    assert part.head.to_dict() == head.to_dict()  # nan/inf survive the round trip
    assert part.base is not None and part.base.to_dict() == base.to_dict()


def test_an_empty_fail_on_stays_empty_and_a_rewrite_drops_a_stale_base(tmp_path):
    write_payload(tmp_path, a_payload(), a_run(), a_run())
    write_payload(tmp_path, a_payload(fail_on=frozenset()), a_run(), None)
    (part,) = read_parts(tmp_path)
    assert part.payload.fail_on == frozenset() and part.base is None


def test_subdirectories_are_parts_in_name_order_and_an_empty_root_has_no_payload(tmp_path):
    with pytest.raises(NoPayloadError):
        read_parts(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoPayloadError):
        read_parts(tmp_path / "empty")
    for label in ("b", "a"):
        write_payload(tmp_path / "legs" / f"leg-{label}", a_payload(label=label), a_run(), None)
    (tmp_path / "legs" / "stray").mkdir()  # no payload.json: not a part
    assert [p.payload.label for p in read_parts(tmp_path / "legs")] == ["a", "b"]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("pr_number", True, "pr_number"),
        ("pr_number", -4, "pr_number"),
        ("head_sha", "HEAD", "head_sha"),
        ("run_id", 12, "run_id"),
        ("label", "a b", "label"),
        ("comment_key", "x-->", "comment_key"),
        ("thresholds", {"abs_max": "1"}, "thresholds"),
        ("thresholds", {"nope": 1}, "unknown threshold"),
        ("thresholds", {"abs_max": -1}, "thresholds"),
        ("fail_on", ["discrepancy", "rm -rf"], "fail_on"),
        ("version", 2, "version 1"),
    ],
)
def test_every_payload_field_is_checked(field, value, message):
    data = a_payload().to_dict()
    data[field] = value
    with pytest.raises(ArtifactError, match=message):
        parse_payload(data)


@pytest.mark.parametrize(
    "path, value",
    [
        (("models", 0, "status"), "pwned"),
        (("models", 0, "n_observations"), 1.5),
        (("models", 0, "observations", 0, "ok"), "yes"),
        (("models", 0, "probe", "shapes", "x"), ["7"]),
        (("models", 0, "notes"), "not a list"),
        (("models", 0), {"script": "s.py", "status": "ok"}),  # name missing
        (("label",), None),
    ],
)
def test_results_fields_are_checked_against_the_schema(path, value):
    data = a_run().to_dict()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ArtifactError):
        parse_results(data, "leg")


def test_the_new_inputs_are_parsed_and_checked():
    env = {"INPUT_MODE": "publish", "INPUT_LABEL": "linux-py3.11"}
    settings = Settings.from_env(env)  # publish mode needs no script
    assert settings.mode == "publish" and settings.sticky_key == "linux-py3.11"
    assert str(settings.payload_path) == "observer-ci-out/payload"
    keyed = Settings.from_env({**env, "INPUT_COMMENT_KEY": "docs", "INPUT_PAYLOAD_DIR": "p"})
    assert keyed.sticky_key == "docs" and str(keyed.payload_path) == "p"
    for bad in ({"INPUT_MODE": "post"}, {"INPUT_SCRIPT": "s.py", "INPUT_COMMENT_KEY": "a/b"}):
        with pytest.raises(SettingsError):
            Settings.from_env(bad)
    with pytest.raises(SettingsError, match="script"):
        Settings.from_env({"INPUT_MODE": "run"})
    old = Settings.from_env({"INPUT_SCRIPT": "s.py", "INPUT_COMMENT": "false"})
    assert old.post_comment is False and "post_comment" in old.deprecations[0]
    new = Settings.from_env({"INPUT_SCRIPT": "s.py", "INPUT_POST_COMMENT": "false"})
    assert new.post_comment is False and new.deprecations == ()


def test_keyed_markers_never_match_each_other():
    keys = ["default", "a", "ab", "a.b"]
    markers = [sticky_marker(k) for k in keys]
    assert len({m.render() for m in markers}) == 4
    assert parse_marker(f"{MARKER}\nold").key == "default"  # the bare marker of old releases
    for mine in markers:
        body = with_marker(f"{MARKER}\nreport", mine)
        assert body.startswith(mine.render() + "\n") and body.endswith("\nreport")
        assert [parse_marker(body).key == k for k in keys] == [k == mine.key for k in keys]
