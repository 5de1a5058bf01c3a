"""Nothing the repository's code starts outlives its phase.

A child is killed with its process group, but a daemon leaves the group (``setsid``) and,
forking twice, its parent chain too: orphans go to init. So the action process makes itself
the *child subreaper* of its tree (Linux ``PR_SET_CHILD_SUBREAPER``, no privilege needed):
every orphan of every descendant is re-parented to the action instead of init, and a daemon
cannot leave the action's tree without help from outside it (a container started through the
Docker socket, ``sudo``/``systemd-run``, ``at``: see the README's security section).

Every child the action starts goes through :func:`popen` (tracked while it runs). When an
untrusted phase ends, :func:`sweep` kills, by PID and in a loop until none is left, every
process that descends from the action but not from a tracked child still running (an orphan
that some phase left behind), every process of the phase's session, and every process whose
environment carries the phase's marker (:data:`PHASE_VAR`; the fallback where there is no
subreaper: another OS, or a test process that did not :func:`arm`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from observer_ci.core.logs import logger

PHASE_VAR = "OBSERVER_CI_PHASE"  # a random token per untrusted child, inherited by its tree
SWEEP_LIMIT_S = 30.0  # a fork bomb gets this long before the sweep gives up (and says so)
_PR_SET_CHILD_SUBREAPER = 36
_lock = threading.RLock()  # held while a child is started and while a sweep scans and kills
_tracked: set[int] = set()  # pids of the children we started that are still running
_armed = {"subreaper": False}
_swept = {"processes": 0}  # killed by sweeps since the last take_swept()


def arm() -> bool:
    """Makes this process the subreaper of its descendants (Linux); False where unsupported.
    Call it in the action's own process only: a sweep then kills every orphan below it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        ok = False
    _armed["subreaper"] = ok
    return ok


def new_phase_token() -> str:
    return secrets.token_hex(16)


def popen(cmd: Any, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` in its own session, tracked until :func:`release`: a concurrent
    sweep leaves a running child's tree alone."""
    with _lock:
        proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
        _tracked.add(proc.pid)
    return proc


def release(proc: subprocess.Popen) -> None:
    with _lock:
        _tracked.discard(proc.pid)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the child's process group (its session leader's pid)."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    elif proc.poll() is None:
        proc.kill()


@contextlib.contextmanager
def tracked(cmd: Any, **kwargs: Any) -> Iterator[subprocess.Popen]:
    """A :func:`popen` child; on leaving, killed with its group and swept (see :func:`sweep`)."""
    token = new_phase_token()
    env = dict(kwargs.pop("env", None) or os.environ)
    env[PHASE_VAR] = token
    proc = popen(cmd, env=env, **kwargs)
    try:
        yield proc
    finally:
        kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        release(proc)
        sweep(session=proc.pid, token=token)


def stop_everything() -> list[int]:
    """The job is cancelled: kills every child still running (and their groups) and, swept
    as above, everything below this process; returns the pids killed."""
    kill = getattr(os, "killpg", os.kill)
    with _lock:
        for pid in list(_tracked):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
    return sweep(everything=True)


def sweep(
    *, session: int | None = None, token: str | None = None, everything: bool = False
) -> list[int]:
    """Kills what an untrusted phase left behind (see the module docstring), looping until
    nothing is left; returns the pids killed. ``everything``: running children's trees too."""
    killed: list[int] = []
    deadline = time.monotonic() + SWEEP_LIMIT_S
    while True:
        with _lock:
            found = _strays(session, token, everything)
            for pid in found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        _reap_orphans()
        if not found:
            break
        killed.extend(found)
        if time.monotonic() > deadline:
            logger.error("%d processes of the repository's code survived the sweep", len(found))
            break
        time.sleep(0.02)
    _reap_orphans()
    if killed:
        logger.warning("killed %d processes the repository's code left running", len(killed))
        with _lock:
            _swept["processes"] += len(killed)
    return killed


def take_swept() -> int:
    """How many processes sweeps killed since the last call."""
    with _lock:
        count, _swept["processes"] = _swept["processes"], 0
    return count


class _Proc:
    __slots__ = ("pid", "ppid", "sid", "zombie")

    def __init__(self, pid: int, ppid: int, sid: int, zombie: bool) -> None:
        self.pid, self.ppid, self.sid, self.zombie = pid, ppid, sid, zombie


def _table() -> dict[int, _Proc]:
    procs: dict[int, _Proc] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return procs
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(name)
        procs[pid] = _Proc(pid, int(fields[1]), int(fields[3]), fields[0] in (b"Z", b"X"))
    return procs


def _strays(session: int | None, token: str | None, everything: bool = False) -> list[int]:
    """Live processes to kill now (see the module docstring); never ourselves, never a tracked
    running child or what descends from it (unless ``everything``)."""
    me = os.getpid()
    procs = _table()
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    protected = {me}
    stack = [] if everything else [pid for pid in _tracked if pid in procs]
    while stack:
        pid = stack.pop()
        if pid not in protected:
            protected.add(pid)
            stack.extend(children.get(pid, []))
    found: set[int] = set()
    if _armed["subreaper"]:
        stack = list(children.get(me, []))
        while stack:
            pid = stack.pop()
            if pid not in protected and pid not in found:
                found.add(pid)
                stack.extend(children.get(pid, []))
    for p in procs.values():
        if p.pid in protected or p.pid in found:
            continue
        if (session is not None and p.sid == session) or (token and _has_token(p.pid, token)):
            found.add(p.pid)
    return sorted(pid for pid in found if not procs[pid].zombie)


def _has_token(pid: int, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{PHASE_VAR}={token}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def _reap_orphans() -> None:
    """Collects the exit status of killed orphans re-parented to us (never a tracked child's:
    its ``Popen`` reads that). Only in an armed process: elsewhere orphans are not ours."""
    if not _armed["subreaper"]:
        return
    me = os.getpid()
    with _lock:
        for p in _table().values():
            if p.ppid == me and p.zombie and p.pid not in _tracked:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(p.pid, os.WNOHANG)
