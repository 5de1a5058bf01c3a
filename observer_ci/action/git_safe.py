"""Every git command the action runs, bounded in time and executing nothing the repository set.

The ``install`` command (pull-request code) runs before the action's ``git fetch`` and
``git worktree add`` (``baseline: base``) and can write ``.git/hooks``, ``.git/config``,
``~/.gitconfig`` or the system config. So each git call here:

- is killed, with everything it started, after ``timeout_s`` (own session, swept by
  :mod:`observer_ci.action.reaper`);
- reads no global or system config (``GIT_CONFIG_GLOBAL=/dev/null``, ``GIT_CONFIG_NOSYSTEM``:
  both writable by the repository's code) and no ``GIT_*`` variable of ours;
- overrides, on the command line (which wins over every config file), each setting of the
  repository's own config that runs a program: hooks (``core.hooksPath=/dev/null``),
  ``core.fsmonitor``, ``core.sshCommand``, ``core.askPass``, credential helpers, external
  diff and textconv programs (``--no-ext-diff --no-textconv``), every ``filter.<driver>``
  the config defines (clean, smudge, process), transports (``protocol.allow=never`` but
  http(s), ssh, git and file: no ``ext::`` nor remote helpers), ``fetch --upload-pack``,
  submodule recursion, auto gc.

The repository config is still read (``actions/checkout`` keeps its credentials there); what it
can still set is data (URLs, refs), not programs. LFS smudging is off too: a base worktree
holds LFS pointer files.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping, Sequence

from observer_ci.action import reaper
from observer_ci.action.isolation import without_secrets
from observer_ci.action.step_files import without_file_commands

GIT_TIMEOUT_S = 600.0  # a git call of ours takes this long at most unless told otherwise
SAFE_CONFIG = (
    "safe.directory=*",  # the container user differs from the checkout's owner
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.sshCommand=ssh",
    "core.askPass=",
    "credential.helper=",  # an empty value empties the list of helpers
    "protocol.allow=never",
    "protocol.https.allow=always",
    "protocol.http.allow=always",
    "protocol.ssh.allow=always",
    "protocol.git.allow=always",
    "protocol.file.allow=always",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "gc.auto=0",
    "maintenance.auto=false",
)
SAFE_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ATTR_NOSYSTEM": "1",
}
# options that replace a program named by the repository config, per subcommand
SAFE_ARGS = {
    "fetch": ("--upload-pack=git-upload-pack", "--no-recurse-submodules"),
    "ls-remote": ("--upload-pack=git-upload-pack",),
    **{cmd: ("--no-ext-diff", "--no-textconv") for cmd in ("diff", "show", "log")},
}
_FILTER_KEYS = ("clean", "smudge", "process")


class GitError(RuntimeError):
    """A git command failed or ran past its time."""


def git_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a git call: no secret, no step file, no ``GIT_*`` of the caller."""
    base = without_file_commands(without_secrets(os.environ if env is None else env))
    clean = {k: v for k, v in base.items() if not k.startswith("GIT_") and k != "SSH_ASKPASS"}
    return {**clean, **SAFE_ENV}


def git(cwd: str, *args: str, timeout_s: float = GIT_TIMEOUT_S, check: bool = True) -> str:
    """Runs ``git <args>`` safely (see the module docstring); its stdout. Raises
    :class:`GitError` on a timeout, and on a failure when ``check``."""
    config = [*SAFE_CONFIG, *filter_overrides(cwd, timeout_s)]
    extra = SAFE_ARGS.get(args[0], ()) if args else ()
    cmd = ["git", *_config_args(config), *args[:1], *extra, *args[1:]]
    code, out, err = _run(cmd, cwd, timeout_s)
    if code is None:
        raise GitError(f"git {' '.join(args)}: no answer within {timeout_s:g}s (stopped)")
    if check and code != 0:
        raise GitError(f"git {' '.join(args)}: {err.strip()[-500:]}")
    return out


def filter_overrides(cwd: str, timeout_s: float = GIT_TIMEOUT_S) -> list[str]:
    """``filter.<driver>.<clean|smudge|process>=`` for every driver the config defines: an
    empty command is no filter."""
    cmd = ["git", *_config_args(SAFE_CONFIG), "config", "-z", "--get-regexp", r"^filter\."]
    code, out, _ = _run(cmd, cwd, timeout_s)
    drivers = set()
    for entry in out.split("\0") if code == 0 else ():
        key = entry.split("\n", 1)[0]
        name, _, last = key[len("filter.") :].rpartition(".")
        if key.startswith("filter.") and name:
            drivers.add(name)
    overrides = [f"filter.{d}.{k}=" for d in sorted(drivers) for k in _FILTER_KEYS]
    return overrides + [f"filter.{d}.required=false" for d in sorted(drivers)]


def _config_args(config: Sequence[str]) -> list[str]:
    return [arg for setting in config for arg in ("-c", setting)]


def _run(cmd: Sequence[str], cwd: str, timeout_s: float) -> tuple[int | None, str, str]:
    """(exit code or None at the timeout, stdout, stderr) of one git process."""
    with reaper.tracked(
        list(cmd),
        cwd=cwd,
        env=git_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            reaper.kill_group(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=5)  # a process outside its group may hold the pipes
            return None, "", ""
    decode = lambda b: b.decode("utf-8", errors="replace")  # noqa: E731
    return proc.returncode, decode(out), decode(err)
