"""The values of the ``status`` and ``comment_status`` outputs live once, in
:mod:`observer_ci.core.constants`; the code writes only those, and action.yml, the composite
variant and the README's outputs table list exactly those."""

from __future__ import annotations

import ast
import re

import pytest
import yaml

from observer_ci.core import constants
from observer_ci.core.constants import (
    COMMENT_STATUSES,
    GATE_STATUSES,
    PUBLISH_ONLY_COMMENT_STATUSES,
)
from tests.support import REPO_ROOT

ROOT = REPO_ROOT
# The modules that write the action's outputs.
WRITERS = ("action/main.py", "action/comment.py", "github/sticky.py", "action/publish.py")
_GROUPS = {"COMMENT_": COMMENT_STATUSES, "GATE_": GATE_STATUSES}


def _names_used(prefix: str) -> set[str]:
    """The constants named ``prefix...`` that the output writers refer to."""
    used = set()
    for module in WRITERS:
        tree = ast.parse((ROOT / "observer_ci" / module).read_text(encoding="utf-8"))
        used |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    return {n for n in used if n.startswith(prefix)}


@pytest.mark.parametrize("prefix", sorted(_GROUPS))
def test_the_values_the_code_writes_are_exactly_the_listed_ones(prefix):
    values = {
        getattr(constants, name)
        for name in _names_used(prefix)
        if isinstance(getattr(constants, name, None), str)
    }
    values.discard(constants.COMMENT_KEY_PATTERN)
    assert values == set(_GROUPS[prefix])
    assert len(set(_GROUPS[prefix])) == len(_GROUPS[prefix])


def test_no_output_writer_spells_a_status_out_itself():
    # "error" is also a workflow command's level (``command("error", ...)``): not checked
    statuses = set(COMMENT_STATUSES) | set(GATE_STATUSES) - {constants.GATE_ERROR}
    for module in WRITERS:
        tree = ast.parse((ROOT / "observer_ci" / module).read_text(encoding="utf-8"))
        literals = [
            (module, n.lineno, n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in statuses
        ]
        assert literals == [], "use the constants of observer_ci.core.constants"


def _quoted(text: str) -> list[str]:
    return re.findall(r'"([a-z-]+)"', text)


@pytest.mark.parametrize("path", ["action.yml", "composite/action.yml"])
def test_action_yml_lists_every_value_and_no_other(path):
    outputs = yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))["outputs"]
    assert _quoted(outputs["status"]["description"]) == list(GATE_STATUSES)
    comment = outputs["comment_status"]["description"]
    assert _quoted(comment) == list(COMMENT_STATUSES)
    both, publish_only = comment.split("publish mode also")
    assert _quoted(publish_only) == list(PUBLISH_ONLY_COMMENT_STATUSES)


def test_the_readme_outputs_table_lists_every_output_and_value():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tables = re.findall(r"^\| output \| meaning \|\n\|---\|---\|\n((?:\|.*\n)+)", readme, re.M)
    assert len(tables) == 1
    rows = dict(
        re.match(r"^\| `(\w+)` \| (.*) \|$", line).groups() for line in tables[0].splitlines()
    )
    outputs = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))["outputs"]
    assert list(rows) == list(outputs)
    values = re.compile(r"`([a-z-]+)`")
    assert values.findall(rows["status"]) == list(GATE_STATUSES)  # `fail_on` is no value
    comment = values.findall(rows["comment_status"])
    assert comment == list(COMMENT_STATUSES)
    assert values.findall(rows["comment_status"].split("publish mode also")[1]) == list(
        PUBLISH_ONLY_COMMENT_STATUSES
    )
