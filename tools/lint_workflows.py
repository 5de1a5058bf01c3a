"""Lint every workflow and action file offline (``make lint-workflows``, part of ``make test``).

- zizmor, the GitHub Actions security linter, at medium severity and above, with
  ``.github/zizmor.yml`` (actions pinned by commit SHA; only observer-ci's own action by tag);
  each remaining exception is suppressed inline with its reason (``# zizmor: ignore[...]``);
- check-jsonschema against GitHub's published schemas, vendored in check-jsonschema
  (``vendor.github-workflows``, ``vendor.github-actions``, ``vendor.dependabot`` for
  ``.github/dependabot.yml``): no network.

Over ``.github/workflows/*.yml``, the README's example workflows (``examples/workflows/*.yml``,
tests/unit/test_examples_in_readme.py keeps the README in step) and both ``action.yml``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZIZMOR_CONFIG = ".github/zizmor.yml"
ACTIONS = ("action.yml", "composite/action.yml")
DEPENDABOT = ".github/dependabot.yml"


def workflows(root: Path = ROOT) -> list[str]:
    """The repository's workflows and the example workflows, relative to ``root``."""
    found = [*root.glob(".github/workflows/*.yml"), *root.glob("examples/workflows/*.yml")]
    return sorted(str(p.relative_to(root)) for p in found)


def commands(root: Path = ROOT) -> list[list[str]]:
    """The checks, each a command line run in ``root``."""
    files = workflows(root)
    return [
        ["zizmor", "--quiet", "--offline", "--config", ZIZMOR_CONFIG, "--min-severity", "medium"]
        + [*files, *ACTIONS],
        ["check-jsonschema", "--builtin-schema", "vendor.github-workflows", *files],
        ["check-jsonschema", "--builtin-schema", "vendor.github-actions", *ACTIONS],
        ["check-jsonschema", "--builtin-schema", "vendor.dependabot", DEPENDABOT],
    ]


def tool(name: str) -> str | None:
    """``name``'s executable: beside this interpreter first (the project's .venv, which no
    one needs to activate), else on ``PATH``."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def main() -> int:
    failed = 0
    for command in commands():
        executable = tool(command[0])
        if executable is None:
            print(f"lint-workflows: {command[0]} is not installed: make install-test")
            return 2
        print(f"lint-workflows: {' '.join(command[:3])} ... ({len(command)} arguments)", flush=True)
        failed |= subprocess.run([executable, *command[1:]], cwd=ROOT).returncode != 0
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
