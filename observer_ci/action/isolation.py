"""Keeping tokens away from the repository's code (``install``, the observation scripts).

The action starts with secrets in its environment (``INPUT_TOKEN``, ``GITHUB_TOKEN``,
``ACTIONS_RUNTIME_TOKEN``, ``ACTIONS_ID_TOKEN_REQUEST_TOKEN``...). Removing them from
``os.environ`` is not enough: ``/proc/<pid>/environ`` keeps showing the environment the
process was started with, to any process of the same user. So, first thing,
:func:`secure_environment` re-executes the action (same pid, ``execve``) with every
secret-looking variable removed; the only secrets it needs (the token to post with) go
through a pipe and are kept in memory only. The process then marks itself non-dumpable
(Linux ``PR_SET_DUMPABLE 0``): its ``/proc/<pid>/environ``, ``mem`` and ``fd`` can no
longer be opened, nor can it be ptraced, by a process without ``CAP_SYS_PTRACE``.
Children get environments built by :func:`without_secrets`.

Where ``execve`` keeps no pid (Windows) the secrets are only removed from ``os.environ``.
The README's security section says what this does and does not protect.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Mapping

# Names whose values are credentials, or only useful together with one.
# A word of the name (between underscores): HF_TOKEN, AWS_SECRET_ACCESS_KEY, but not
# TOKENIZERS_PARALLELISM.
SECRET_NAME_RE = re.compile(
    r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|PRIVATE_KEY|API_KEY|ACCESS_KEY)(?:_|$)",
    re.I,
)
SECRET_NAMES = frozenset(
    {
        "ACTIONS_RUNTIME_URL",
        "ACTIONS_ID_TOKEN_REQUEST_URL",
        "ACTIONS_CACHE_URL",
        "ACTIONS_RESULTS_URL",
    }
)
# The secrets the action itself uses (to post the comment); kept in memory only.
KEPT_SECRET_NAMES = ("INPUT_TOKEN", "GITHUB_TOKEN")
_FD_VAR = "OBSERVER_CI_SECRETS_FD"
_MAX_PIPE_BYTES = 60_000  # under the 64 KiB a pipe holds without a reader
_PR_SET_DUMPABLE = 4


def is_secret_name(name: str) -> bool:
    return name in SECRET_NAMES or bool(SECRET_NAME_RE.search(name))


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """The environment for repository code: every secret-looking variable removed."""
    return {k: v for k, v in env.items() if not is_secret_name(k) and k != _FD_VAR}


def secure_environment() -> dict[str, str]:
    """The action's environment, secrets included, with no secret left where repository
    code could read it. May replace the running program (``execve``) and not return:
    call it before doing anything else."""
    fd = os.environ.pop(_FD_VAR, None)
    if fd is not None:  # the re-executed process
        kept = _read_kept(fd)
    else:
        found = {k: v for k, v in os.environ.items() if is_secret_name(k)}
        kept = {k: found[k] for k in KEPT_SECRET_NAMES if k in found}
        if found and _can_reexecute(kept):
            _reexecute_without_secrets(kept)  # does not return
    for name in [k for k in os.environ if is_secret_name(k)]:
        del os.environ[name]
    make_undumpable()
    return {**os.environ, **kept}


def make_undumpable() -> bool:
    """Linux: forbid other processes of our user to read our memory and /proc files
    (reset by ``execve``, so children are unaffected). False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _can_reexecute(kept: Mapping[str, str]) -> bool:
    if os.name != "posix" or not getattr(sys, "orig_argv", None) or not sys.executable:
        return False
    return len(json.dumps(dict(kept)).encode("utf-8")) <= _MAX_PIPE_BYTES


def _reexecute_without_secrets(kept: Mapping[str, str]) -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, json.dumps(dict(kept)).encode("utf-8"))
    finally:
        os.close(write_end)
    os.set_inheritable(read_end, True)
    env = without_secrets(os.environ)
    env[_FD_VAR] = str(read_end)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def _read_kept(fd_text: str) -> dict[str, str]:
    try:
        fd = int(fd_text)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        os.close(fd)
        data = json.loads(b"".join(chunks) or b"{}")
    except (ValueError, OSError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if k in KEPT_SECRET_NAMES}
