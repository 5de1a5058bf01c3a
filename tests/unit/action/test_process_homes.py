"""One home for starting processes in the parent: ``action/reaper.py``. A process started any
other way is not tracked, so a sweep would kill it as a stray, and repository code started
that way would escape the sweep, the step-file guard and the secret filter."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO_ROOT

PARENT_PACKAGES = ("action", "github", "report", "core")
SPAWNERS = {
    ("subprocess", name) for name in ("Popen", "run", "call", "check_call", "check_output")
} | {("os", name) for name in ("system", "popen", "spawnv", "spawnve", "posix_spawn", "fork")}
HOME = REPO_ROOT / "observer_ci" / "action" / "reaper.py"


def _spawns(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and (owner.id, node.func.attr) in SPAWNERS:
                found.append(f"{path.name}:{node.lineno} {owner.id}.{node.func.attr}")
    return found


def test_only_the_reaper_starts_processes_in_the_parent():
    files = [
        p
        for package in PARENT_PACKAGES
        for p in sorted((REPO_ROOT / "observer_ci" / package).rglob("*.py"))
    ]
    assert HOME in files and _spawns(HOME)  # the check does see a spawn
    offenders = [s for p in files if p != HOME for s in _spawns(p)]
    assert offenders == []
