"""``make demo`` / ``make test`` set themselves up (``tools/install.py``): the active virtualenv,
else the project's ``.venv``; torch from the CPU index, skipped fast when it does not answer."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

spec = importlib.util.spec_from_file_location("install_tool", REPO_ROOT / "tools" / "install.py")
assert spec is not None and spec.loader is not None
install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install)

BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)  # outside any virtualenv


def make_n(target: str, bootstrap: str) -> list[str]:
    """The commands ``make -n target`` would run, no virtualenv active."""
    unset = ("VIRTUAL_ENV", "PYTHON", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")  # under `make test`
    env = {k: v for k, v in os.environ.items() if k not in unset}
    proc = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"BOOTSTRAP_PYTHON={bootstrap}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.splitlines()


def test_outside_a_virtualenv_make_test_sets_up_and_checks_everything_in_the_project_venv():
    lines = make_n("test", BASE_PYTHON)
    venv_python = str(REPO_ROOT / ".venv" / "bin" / "python")
    assert lines[0] == f"{BASE_PYTHON} tools/install.py test,transformers"
    checks = [line for line in lines[1:] if not line.startswith("make ")]  # sub-makes
    assert [line.split(" ", 1)[0] for line in checks] == [venv_python] * len(checks)
    wanted = ("-m ruff check .", "-m ruff format --check .", "importlinter", "-m mypy")
    for fragment in (*wanted, "-m pytest -q -n 2 --dist loadfile tests"):
        assert any(fragment in line for line in checks), (fragment, checks)


def test_inside_a_virtualenv_make_uses_it(tmp_path: Path):
    venv = tmp_path / "venv"
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    lines = make_n("demo", python)
    assert lines[0] == f"{python} tools/install.py transformers"
    assert any(line.strip().startswith(f"{python} entrypoint.py --dry-run") for line in lines)


def test_an_unreachable_torch_index_is_skipped_within_seconds():
    begin = time.monotonic()
    why = install.index_answers("http://127.0.0.1:9/whl/cpu")  # the discard port: refused
    assert why is not None and time.monotonic() - begin < install.INDEX_PROBE_TIMEOUT_S + 1


def test_an_index_that_answers_is_used(tmp_path: Path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text("<a href='torch-2.13.0.whl'>torch</a>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert install.index_answers(f"http://127.0.0.1:{server.server_port}") is None
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("recorded", "wanted", "done"),
    [
        ("test,transformers", {"transformers"}, True),  # `make demo` after `make test`
        ("transformers", {"test", "transformers"}, False),
        ("", {"transformers"}, False),
    ],
)
def test_a_second_run_finds_the_set_up_done(tmp_path: Path, recorded, wanted, done):
    stamp = tmp_path / install.STAMP
    if recorded:
        stamp.write_text(f"{install.stamp_key()} {recorded}\n")
    assert install.up_to_date(stamp, wanted) is done
    if recorded:
        stamp.write_text(f"0123456789abcdef {recorded}\n")  # other pins: set up again
        assert install.up_to_date(stamp, wanted) is False
