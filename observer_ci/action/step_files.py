"""The runner's step files (``GITHUB_OUTPUT``, ``GITHUB_ENV``, ``GITHUB_PATH``, ``GITHUB_STATE``,
``GITHUB_STEP_SUMMARY``...) stay the action's: the repository's code neither sees them nor
leaves anything in them.

- The class, not a list: the five names, any ``GITHUB_*`` variable naming a file in the
  directory that holds one of them (the runner's ``_runner_file_commands``, the Docker
  variant's ``/github/file_commands``: a future file command lives there too), and any
  variable whose value names one of those files. :func:`without_file_commands` drops them
  from every untrusted environment.
- The names alone are not enough: the directory can be listed, ``/proc/<ppid>/environ`` or
  ``/proc/<ppid>/fd`` read by a process with ``CAP_SYS_PTRACE`` (root in the container). So,
  before the first untrusted process of a phase starts, :func:`guarded` opens each file
  (``O_APPEND``, close-on-exec: never inherited) and keeps its bytes; when the phase ends
  (every process of it killed, :mod:`observer_ci.action.reaper`) it puts every file back as
  it was: truncated to those bytes, its mode back, a file replaced by a symlink or another
  inode recreated. The runner reads these files only when the step ends, so what the
  repository's code wrote never reaches it; the action writes its summary and outputs after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from observer_ci.core.logs import logger

FILE_COMMAND_NAMES = (
    "GITHUB_OUTPUT",
    "GITHUB_ENV",
    "GITHUB_PATH",
    "GITHUB_STATE",
    "GITHUB_STEP_SUMMARY",
)
_FLAGS = os.O_RDWR | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def file_command_paths(env: Mapping[str, str]) -> dict[str, str]:
    """The step files named in ``env``: variable name -> absolute path (see the docstring)."""
    named = {k: env[k] for k in FILE_COMMAND_NAMES if env.get(k)}
    dirs = {os.path.dirname(os.path.abspath(v)) for v in named.values()}
    found = {k: os.path.abspath(v) for k, v in named.items()}
    for key, value in env.items():
        candidate = key.startswith("GITHUB_") and key not in found and os.path.isabs(value)
        if candidate and os.path.dirname(value) in dirs and not os.path.isdir(value):
            found[key] = os.path.abspath(value)
    return found


def without_file_commands(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the step files' variables, nor any variable mentioning one of them."""
    paths = file_command_paths(env)
    values = set(paths.values())
    return {
        k: v
        for k, v in env.items()
        if k not in paths and not any(p in v for p in values if len(p) > 1)
    }


@dataclass
class _Kept:
    """One step file as the action left it: its bytes, mode and inode, and a private fd."""

    name: str
    path: str
    data: bytes | None  # None: there was nothing at ``path``
    mode: int = 0o644
    fd: int | None = None
    dir_mode: int | None = None  # its directory's: a chmod 000 there hides it from the runner

    @classmethod
    def open(cls, name: str, path: str) -> _Kept | None:
        """Kept: a regular file, or nothing at ``path``; None for anything else (a directory,
        a FIFO: not a step file the runner made, left alone)."""
        try:
            dir_mode: int | None = stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)
        except OSError:
            dir_mode = None
        if not os.path.lexists(path):
            return cls(name, path, None, dir_mode=dir_mode)
        try:
            fd = os.open(path, _FLAGS | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return None
        return cls(name, path, _read_all(fd), stat.S_IMODE(info.st_mode), fd, dir_mode)

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def restore(self) -> bool:
        """Puts the file back (its directory's mode too); True when something had changed it."""
        changed = _restore_mode(os.path.dirname(self.path), self.dir_mode)
        return self._restore_file() or changed

    def _restore_file(self) -> bool:
        if self.data is None:
            return _remove(self.path)
        if self.fd is not None and _same_file(self.fd, self.path):
            info = os.fstat(self.fd)
            changed = stat.S_IMODE(info.st_mode) != self.mode
            if changed:
                os.fchmod(self.fd, self.mode)
            if info.st_size != len(self.data) or _read_all(self.fd) != self.data:
                os.ftruncate(self.fd, 0)
                _write_all(self.fd, self.data)  # O_APPEND: from offset 0 after the truncate
                changed = True
            return changed
        _remove(self.path)  # a symlink, a directory, another file: ours again
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.close()
        fd = os.open(self.path, _FLAGS | os.O_CREAT | os.O_EXCL, self.mode)
        os.fchmod(fd, self.mode)
        _write_all(fd, self.data)
        self.fd = fd
        return True


def _restore_mode(directory: str, mode: int | None) -> bool:
    try:
        if mode is None or stat.S_IMODE(os.stat(directory).st_mode) == mode:
            return False
        os.chmod(directory, mode)
    except OSError:
        return False
    return True


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _same_file(fd: int, path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) == (mine.st_dev, mine.st_ino)


def _remove(path: str) -> bool:
    if not os.path.lexists(path):
        return False
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return True


_lock = threading.RLock()
_kept: list[_Kept] = []
_active = {"phases": 0}
_undone: set[str] = set()  # the step files the repository's code changed, this run


@contextlib.contextmanager
def guarded(env: Mapping[str, str]) -> Iterator[None]:
    """Around one untrusted phase (its processes all dead when the body ends): the step files
    are kept as they are when no other phase runs, and put back when the body ends."""
    with _lock:
        if _active["phases"] == 0:
            _keep(file_command_paths(env))
        _active["phases"] += 1
    try:
        yield
    finally:
        with _lock:
            _active["phases"] -= 1
            restore()


def _keep(paths: Mapping[str, str]) -> None:
    for kept in _kept:
        kept.close()
    opened = (_Kept.open(name, path) for name, path in paths.items())
    _kept[:] = [kept for kept in opened if kept is not None]


def restore() -> list[str]:
    """Puts every kept step file back; the names of those the repository's code changed."""
    changed = []
    with _lock:
        for kept in _kept:
            try:
                if kept.restore():
                    changed.append(kept.name)
            except OSError as e:
                logger.error("could not restore %s (%s): %s", kept.name, kept.path, e)
                changed.append(kept.name)
    _undone.update(changed)  # the report says so (observer_ci.action.workspace.phase_findings)
    for name in changed:
        logger.warning("the repository's code changed %s: put back as it was", name)
    return changed


def take_undone() -> list[str]:
    """The step files the repository's code changed since the last call (sorted)."""
    with _lock:
        names = sorted(_undone)
        _undone.clear()
    return names


def kept_paths() -> list[Path]:
    """The step files kept now (for tests and logs)."""
    with _lock:
        return [Path(k.path) for k in _kept]
