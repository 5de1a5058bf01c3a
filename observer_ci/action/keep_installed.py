"""Constraints for installing observer-ci into a job's own Python without replacing its torch.

``python -m observer_ci.action.keep_installed constraints.txt`` prints a constraints file: an
installed torch is pinned at its installed version (a CUDA or nightly build stays), other
installed packages are left to pip (kept when they satisfy observer-ci's requirements),
and packages not installed yet get the known-good pins. Runs before observer-ci is
installed (the composite action puts the source on ``PYTHONPATH``): standard library only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from importlib import metadata

KEPT_AS_INSTALLED = ("torch",)  # never replaced: the user's build is the one to check
_PIN_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def constraints_keeping_installed(
    lines: Iterable[str], installed: Callable[[str], str | None] = installed_version
) -> list[str]:
    """The constraint lines to use in the job's environment (see the module docstring)."""
    kept: list[str] = []
    for line in lines:
        match = _PIN_RE.match(line)
        if not match:
            continue
        name = match.group(1)
        version = installed(name)
        if version is None:
            kept.append(f"{name}=={match.group(2)}")
        elif _normalise(name) in KEPT_AS_INSTALLED:
            kept.append(f"{name}=={version}")
    return kept


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m observer_ci.action.keep_installed constraints.txt", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        print("\n".join(constraints_keeping_installed(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
