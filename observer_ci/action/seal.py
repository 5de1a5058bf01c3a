"""What the action wrote stays what it wrote: ``results.json``, ``report.md`` and the payload
are sealed (their SHA-256 and bytes kept in memory) once written, and checked before the
comment is posted and at the end: a file changed by anything (a process that escaped the
sweep, :mod:`observer_ci.action.reaper`) is written back and the change is a warning."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from observer_ci.core import workflow_commands as workflow


@dataclass
class Seal:
    """Files and the bytes they held when sealed."""

    files: dict[Path, tuple[str, bytes]] = field(default_factory=dict)

    @classmethod
    def of(cls, paths: Iterable[Path]) -> Seal:
        seal = cls()
        seal.add(paths)
        return seal

    def add(self, paths: Iterable[Path]) -> None:
        """Seals each file (a directory: the files under it)."""
        for path in paths:
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            for file in files:
                if file.is_file() and not file.is_symlink():
                    data = file.read_bytes()
                    self.files[file] = (hashlib.sha256(data).hexdigest(), data)

    def verify(self) -> list[Path]:
        """Writes back every sealed file that changed; the files that had."""
        changed = []
        for path, (digest, data) in self.files.items():
            try:
                same = not path.is_symlink() and _digest(path) == digest
            except OSError:
                same = False
            if not same:
                changed.append(path)
                if path.is_symlink():
                    path.unlink()
                elif path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        if changed:
            names = ", ".join(str(p) for p in changed)
            workflow.command(
                "warning",
                f"{names} changed after observer-ci wrote them (a process of the pull request's "
                "code outlived the run?): written back as they were",
            )
        return changed


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
