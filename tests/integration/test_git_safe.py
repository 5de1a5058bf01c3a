"""The action's git calls (``observer_ci.action.git_safe``) against a repository whose hooks and
config were planted by pull-request code: a ``post-checkout`` hook that sleeps 60 s, a
``core.fsmonitor`` program, a smudge/process filter, a credential helper, an ``uploadpack``
program, an ``ext::`` remote, a global ``~/.gitconfig`` hook path; real git, real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from observer_ci.action import git_safe

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the planted programs are sh scripts")


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def program(path: Path, mark: Path, extra: str = "") -> str:
    path.write_text(f'#!/bin/sh\necho ran >> "{mark}"\n{extra}\n', encoding="utf-8")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def planted(tmp_path, monkeypatch) -> dict:
    repo, marks = tmp_path / "repo", tmp_path / "marks"
    marks.mkdir()
    sh(tmp_path, "init", "-q", "-b", "main", str(repo))
    sh(repo, "config", "user.email", "ci@example.invalid")
    sh(repo, "config", "user.name", "ci")
    (repo / "weights.txt").write_text("base\n", encoding="utf-8")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-qm", "base")
    base = sh(repo, "rev-parse", "HEAD")
    tools = tmp_path / "tools"
    tools.mkdir()
    hook = repo / ".git" / "hooks" / "post-checkout"
    program(hook, marks / "post-checkout", "sleep 60")
    program(repo / ".git" / "hooks" / "reference-transaction", marks / "reference-transaction")
    config = {
        "core.fsmonitor": program(tools / "fsmonitor", marks / "fsmonitor", "exit 1"),
        "filter.evil.smudge": program(tools / "smudge", marks / "smudge", "cat"),
        "filter.evil.process": program(tools / "process", marks / "process", "exit 1"),
        "filter.evil.required": "true",
        "credential.helper": "!" + program(tools / "cred", marks / "credential"),
        "remote.origin.url": f"ext::sh -c {program(tools / 'ext', marks / 'ext')}",
        "remote.origin.uploadpack": program(tools / "upload", marks / "uploadpack"),
        "core.sshCommand": program(tools / "ssh", marks / "ssh"),
        "submodule.recurse": "true",
    }
    for key, value in config.items():
        sh(repo, "config", key, value)
    (repo / ".git" / "info" / "attributes").write_text("* filter=evil\n", encoding="utf-8")
    evil_hooks = tmp_path / "global-hooks"
    evil_hooks.mkdir()
    program(evil_hooks / "post-checkout", marks / "global-post-checkout")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {evil_hooks}\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))  # the action's own environment: HOME as on a runner
    return {"repo": repo, "base": base, "marks": marks, "tmp": tmp_path}


def test_plain_git_runs_what_was_planted(planted):
    # the control: the same checkout without git_safe runs the planted programs
    repo, marks = planted["repo"], planted["marks"]
    proc = subprocess.Popen(
        ["git", "worktree", "add", "--detach", str(planted["tmp"] / "plain"), planted["base"]],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not list(marks.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert {p.name for p in marks.iterdir()} & {"fsmonitor", "process", "post-checkout"}


def test_nothing_planted_runs_and_the_checkout_is_quick(planted):
    repo, marks = planted["repo"], planted["marks"]
    worktree = planted["tmp"] / "base-worktree"
    begin = time.monotonic()
    git_safe.git(str(repo), "worktree", "add", "--detach", str(worktree), planted["base"])
    with pytest.raises(git_safe.GitError):  # ext:: is not allowed, nor is any helper run
        git_safe.git(str(repo), "fetch", "--depth=1", "origin", planted["base"])
    git_safe.git(str(repo), "worktree", "remove", "--force", str(worktree))
    elapsed = time.monotonic() - begin
    assert sorted(p.name for p in marks.iterdir()) == []
    assert elapsed < 20, elapsed  # the 60 s hook did not run
    assert not worktree.exists()
    print(f"worktree add + fetch + remove with planted hooks: {elapsed:.2f}s")


def test_a_checkout_keeps_the_files_unfiltered(planted):
    worktree = planted["tmp"] / "wt"
    git_safe.git(str(planted["repo"]), "worktree", "add", "--detach", str(worktree), "HEAD")
    assert (worktree / "weights.txt").read_text(encoding="utf-8") == "base\n"
    assert sorted(p.name for p in planted["marks"].iterdir()) == []


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers (a hanging git remote)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def test_a_hanging_git_is_stopped_at_its_timeout(planted, silent_server):
    begin = time.monotonic()
    with pytest.raises(git_safe.GitError, match="no answer within 2s"):
        git_safe.git(
            str(planted["repo"]), "fetch", f"git://127.0.0.1:{silent_server}/x", timeout_s=2
        )
    elapsed = time.monotonic() - begin
    assert elapsed < 10, elapsed
    print(f"hanging git fetch stopped after {elapsed:.2f}s (timeout 2 s)")


def test_filter_drivers_from_every_config_are_neutralized(planted):
    overrides = git_safe.filter_overrides(str(planted["repo"]))
    assert "filter.evil.smudge=" in overrides and "filter.evil.process=" in overrides
    assert "filter.evil.required=false" in overrides
