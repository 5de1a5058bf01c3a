"""What users copy is what is linted: every workflow in the README is a file of
examples/workflows/ verbatim, and every action any workflow or action.yml uses is pinned the
one way .github/zizmor.yml allows (tools/lint_workflows.py runs zizmor on the same files)."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from tests.support import REPO_ROOT

ROOT = REPO_ROOT
EXAMPLES = ROOT / "examples" / "workflows"
HEADER_RE = re.compile(r"# (examples/workflows/[\w.-]+\.yml)\b")
PINNED_RE = re.compile(r"([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # (v\d+\.\d+\.\d+)")
OWN_RE = re.compile(r"observer-ci/observer-ci(?:/composite)?@v1")
sys.path.insert(0, str(ROOT / "tools"))
import lint_workflows  # noqa: E402


def readme_yaml_blocks() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```yaml\n(.*?)^```$", readme, re.M | re.S)


def test_every_workflow_in_the_readme_is_an_example_file_verbatim():
    workflows = [b for b in readme_yaml_blocks() if "steps:" in b]
    assert len(workflows) >= 7
    shown = []
    for block in workflows:
        header = HEADER_RE.match(block)
        assert header, f"a README workflow without its '# examples/workflows/X.yml' line:\n{block}"
        path = header.group(1)
        assert block == (ROOT / path).read_text(encoding="utf-8"), (
            f"README.md's block for {path} differs from the file: edit the file, then copy it "
            "into the README (or the other way round)"
        )
        shown.append(path)
    files = sorted(str(p.relative_to(ROOT)) for p in EXAMPLES.glob("*.yml"))
    assert sorted(shown) == files  # each file shown once, no file left out


def test_each_example_names_itself_and_is_a_complete_workflow():
    for path in EXAMPLES.glob("*.yml"):
        text = path.read_text(encoding="utf-8")
        assert HEADER_RE.match(text).group(1) == f"examples/workflows/{path.name}"
        data = yaml.safe_load(text)
        assert {"name", True, "permissions", "jobs"} <= set(data), path.name  # True: `on`


def test_the_fork_pair_is_wired_by_name_and_suppresses_only_its_trigger():
    observe = yaml.safe_load((EXAMPLES / "fork-observe.yml").read_text())
    publish_text = (EXAMPLES / "fork-publish.yml").read_text()
    assert yaml.safe_load(publish_text)[True]["workflow_run"]["workflows"] == [observe["name"]]
    ignores = re.findall(r"^(.*)# zizmor: ignore\[([\w-]+)\](.*)$", publish_text, re.M)
    assert [(line.strip(), rule) for line, rule, _ in ignores] == [
        ("workflow_run:", "dangerous-triggers")
    ]
    assert ignores[0][2].strip()  # with its reason


def uses_lines() -> dict[str, list[str]]:
    files = [*lint_workflows.workflows(), *lint_workflows.ACTIONS]
    return {
        f: re.findall(r"^\s*(?:-\s+)?uses:\s*(.+?)\s*$", (ROOT / f).read_text(), re.M)
        for f in files
    }


def test_every_action_is_pinned_by_sha_with_its_version_or_is_observer_ci_itself():
    shas: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path, lines in uses_lines().items():
        for line in lines:
            line = line.split("   #")[0].strip()  # an explanatory comment after the pin
            if line.startswith("./"):
                assert not path.startswith("examples/"), (path, line)  # users have no ./composite
                continue
            if OWN_RE.fullmatch(line):
                assert path.startswith("examples/"), (path, line)  # the repository uses ./
                continue
            match = PINNED_RE.fullmatch(line)
            assert match, f"{path}: {line!r} is not pinned by commit SHA with '# vX.Y.Z'"
            shas[match.group(1)].add((match.group(2), match.group(3)))
    assert {"actions/checkout", "actions/attest-build-provenance"} <= set(shas)
    assert {a: s for a, s in shas.items() if len(s) > 1} == {}  # one pin per action everywhere


def test_every_checkout_keeps_no_credentials():
    for path in lint_workflows.workflows():
        data = yaml.safe_load((ROOT / path).read_text())
        for job in data["jobs"].values():
            for s in job["steps"]:
                if s.get("uses", "").startswith("actions/checkout@"):
                    assert s["with"]["persist-credentials"] is False, path


def test_the_linter_covers_every_workflow_and_both_actions():
    on_disk = {str(p.relative_to(ROOT)) for p in ROOT.glob(".github/workflows/*")}
    on_disk |= {str(p.relative_to(ROOT)) for p in EXAMPLES.iterdir()}
    assert set(lint_workflows.workflows()) == on_disk  # no .yaml file left out
    zizmor, workflow_schema, action_schema, dependabot = lint_workflows.commands()
    assert zizmor[:2] == ["zizmor", "--quiet"] and "--offline" in zizmor
    assert zizmor[zizmor.index("--min-severity") + 1] == "medium"
    assert zizmor[zizmor.index("--config") + 1] == ".github/zizmor.yml"
    assert on_disk | {"action.yml", "composite/action.yml"} <= set(zizmor)
    assert workflow_schema[2] == "vendor.github-workflows"
    assert set(workflow_schema[3:]) == on_disk
    assert action_schema[2:] == ["vendor.github-actions", "action.yml", "composite/action.yml"]
    assert dependabot[2:] == ["vendor.dependabot", ".github/dependabot.yml"]
    policies = yaml.safe_load((ROOT / ".github/zizmor.yml").read_text())
    assert policies["rules"]["unpinned-uses"]["config"]["policies"] == {
        "observer-ci/*": "ref-pin",
        "*": "hash-pin",
    }


def test_dependabot_updates_every_pinned_ecosystem_where_its_pins_live():
    config = yaml.safe_load((ROOT / ".github/dependabot.yml").read_text())
    where = {
        u["package-ecosystem"]: u.get("directories", [u.get("directory")])
        for u in config["updates"]
    }
    # constraints.txt and pyproject.toml; the workflows and composite/action.yml; the Dockerfile
    assert where == {"pip": ["/"], "github-actions": ["/", "/composite"], "docker": ["/"]}


def test_linters_are_found_beside_the_interpreter_without_an_activated_venv(tmp_path, monkeypatch):
    """``make test`` from a fresh clone runs ``.venv/bin/python`` with no venv on ``PATH``:
    zizmor and check-jsonschema must still be found (they sit beside the interpreter)."""
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH at all
    found = lint_workflows.tool("zizmor")
    assert found is not None and found.startswith(str(Path(sys.executable).parent))
    assert lint_workflows.tool("no-such-linter-here") is None
