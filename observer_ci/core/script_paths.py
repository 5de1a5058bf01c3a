"""Observation script paths and globs, resolved once, before anything runs (torch-free).

A path that does not exist, a glob that matches no file, a directory or an unreadable file
is a usage mistake: :func:`resolve_scripts` raises :class:`ScriptPathError` naming every such
pattern and what it matched, and ``observer-ci run`` (``cli.py``) and the action
(``Settings.check_scripts``) turn it into exit 2. The base commit of a pull request may lack a
script the pull request adds: that run resolves with ``strict=False`` and keeps the pattern,
so its failure becomes a row (``pipeline/scripts.py``).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from observer_ci.core.exceptions import ScriptPathError

__all__ = ["ScriptPathError", "resolve_scripts", "script_problem"]

SHOWN_MATCHES = 5  # a glob that matched only directories: this many of them are named


def script_problem(path: str, cwd: str | os.PathLike[str] | None = None) -> str | None:
    """Why ``path`` (relative to ``cwd``) cannot be run as a script, or None."""
    full = Path(cwd or ".") / path
    if full.is_dir():
        return f"{path!r} is a directory, not a script: give the scripts in it ('{path}/*.py')"
    if not full.exists():
        return f"{path!r}: no such file"
    if not full.is_file():
        return f"{path!r} is not a regular file"
    try:
        with open(full, "rb") as f:
            f.read(1)
    except OSError as e:
        return f"{path!r} cannot be read: {e.strerror or e}"
    return None


def resolve_scripts(
    patterns: Sequence[str], cwd: str | os.PathLike[str] | None = None, *, strict: bool = True
) -> list[str]:
    """The scripts ``patterns`` name (globs expanded, sorted, each once), relative to ``cwd``.

    ``strict``: every pattern must name at least one readable file, else
    :class:`ScriptPathError` lists them all. Not strict: a pattern matching nothing is kept
    as given, so its failure is reported where it runs.
    """
    scripts: list[str] = []
    problems: list[str] = []
    for pattern in patterns:
        matches = _matches(pattern, cwd)
        if strict:
            files = [m for m in matches if script_problem(m, cwd) is None]
            if not files:
                problems.append(_why_nothing(pattern, matches, cwd))
            matches = files
        scripts.extend(m for m in (matches or [pattern]) if m not in scripts)
    if problems:
        raise ScriptPathError(_message(problems))
    return scripts


def _matches(pattern: str, cwd: str | os.PathLike[str] | None) -> list[str]:
    if not glob.has_magic(pattern):
        return [pattern]
    return sorted(glob.glob(pattern, root_dir=cwd))


def _why_nothing(pattern: str, matches: list[str], cwd: str | os.PathLike[str] | None) -> str:
    if not glob.has_magic(pattern):
        return script_problem(pattern, cwd) or f"{pattern!r}: not a script"
    if not matches:
        where = f" in {cwd}" if cwd else ""
        return f"the glob {pattern!r} matched no file{where}"
    shown = ", ".join(matches[:SHOWN_MATCHES]) + (", ..." if len(matches) > SHOWN_MATCHES else "")
    return f"the glob {pattern!r} matched no readable file, only: {shown}"


def _message(problems: list[str]) -> str:
    head = "observation script" + ("s" if len(problems) > 1 else "")
    return f"{head} not found: " + "; ".join(problems)
