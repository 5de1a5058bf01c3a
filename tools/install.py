"""The set-up behind ``make demo`` and ``make test``: a project virtualenv, CPU torch, observer-ci.

``python3 tools/install.py --which`` prints the interpreter the Makefile uses: the active
virtualenv's (``VIRTUAL_ENV`` set, or this interpreter is one), else ``.venv/bin/python``.
``python3 tools/install.py EXTRAS`` (``test,transformers``) makes that environment ready:

1. ``.venv`` is created when no virtualenv is active (Debian's externally-managed python,
   macOS's and a CI runner's all work the same);
2. torch ``2.13.0`` from the PyTorch CPU wheel index (``TORCH_INDEX_URL``, default
   https://download.pytorch.org/whl/cpu; PyPI's Linux wheel is the CUDA build, about 3 GB with
   its ``nvidia-*`` packages). An index that does not answer within a few seconds is skipped:
   the plain pin then comes from pip's configured indexes. ``TORCH_INDEX_URL=`` skips the
   index, ``TORCH_SPEC`` replaces the requirement (a CUDA build, a local wheel file);
3. observer-ci in editable mode with ``EXTRAS``, every package at its ``constraints.txt`` pin.

Each step prints what it installs and about how long it takes; a stamp in the environment
(constraints, pyproject, extras and torch spec hashed) makes a second run a no-op.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
INDEX_PROBE_TIMEOUT_S = 5.0
STAMP = ".observer-ci-install"


def in_virtualenv() -> bool:
    """True when this interpreter is a virtualenv's (or one is active)."""
    return bool(os.environ.get("VIRTUAL_ENV")) or sys.prefix != sys.base_prefix


def target_python() -> Path:
    """The interpreter the Makefile runs: this one inside a virtualenv, else ``.venv``'s."""
    if in_virtualenv():
        active = os.environ.get("VIRTUAL_ENV")
        if active and sys.prefix == sys.base_prefix:  # `make` run by a python outside it
            return _venv_python(Path(active))
        return Path(sys.executable)
    return _venv_python(VENV)


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def say(message: str) -> None:
    print(f"install: {message}", flush=True)


def run(cmd: list[str]) -> float:
    """Runs ``cmd`` (its output shown), returns its seconds; exits on failure."""
    begin = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT)
    if proc.returncode != 0:
        say(f"failed ({proc.returncode}): {' '.join(cmd)}")
        sys.exit(proc.returncode)
    return time.monotonic() - begin


def make_venv(python: Path) -> None:
    if python.exists():
        return
    say(f"creating the project virtualenv {VENV.relative_to(ROOT)} (about 5 s)")
    begin = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "venv", str(VENV)])
    if proc.returncode != 0:
        say(
            "could not create it: on Debian/Ubuntu install the venv module first "
            "(apt-get install python3-venv), or activate a virtualenv of your own"
        )
        sys.exit(proc.returncode)
    say(f"created in {time.monotonic() - begin:.0f}s")


def torch_pin() -> str:
    """``torch==X`` from constraints.txt (one home for the version)."""
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("torch=="):
            return line.split("#")[0].strip()
    raise SystemExit("install: constraints.txt pins no torch")


def index_answers(url: str) -> str | None:
    """None when ``url`` answers within a few seconds, else why not."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=INDEX_PROBE_TIMEOUT_S):
            return None
    except (urllib.error.URLError, OSError, ValueError) as e:
        return str(getattr(e, "reason", e))


def installed_torch(python: Path) -> str | None:
    code = "import importlib.metadata as m; print(m.version('torch'))"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def install_torch(python: Path, pip: list[str]) -> None:
    pin = torch_pin()
    spec = os.environ.get("TORCH_SPEC", "").strip() or pin
    have = installed_torch(python)
    if spec == pin and have and have.split("+")[0] == pin.split("==")[1]:
        say(f"torch {have} is installed already")
        return
    index = os.environ.get("TORCH_INDEX_URL", CPU_INDEX).strip()
    # torch's own dependencies at their pins (an overriding spec may need others)
    extra = ["-c", "constraints.txt"] if spec == pin else []
    if index:
        why = index_answers(index)
        if why is None:
            extra = ["--index-url", index, "--no-deps"]  # its dependencies: the next step
            say(f"{spec} from {index} (about 200 MB; 30-90 s)")
        else:
            say(f"{index} did not answer ({why}): {spec} from pip's configured indexes")
    else:
        say(f"{spec} from pip's configured indexes (TORCH_INDEX_URL is empty)")
    say(f"torch installed in {run([*pip, *extra, spec]):.0f}s")


def stamp_key() -> str:
    """What an install depends on: the pins, the project's metadata, the torch spec."""
    digest = hashlib.sha256()
    for name in ("constraints.txt", "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    digest.update(os.environ.get("TORCH_SPEC", "").encode())
    return digest.hexdigest()[:16]


def up_to_date(stamp: Path, extras: set[str]) -> bool:
    """True when an install with these extras (or more) at these pins is recorded."""
    if not stamp.is_file():
        return False
    for line in stamp.read_text(encoding="utf-8").splitlines():
        key, _, done = line.partition(" ")
        if key == stamp_key() and extras <= set(done.split(",")):
            return True
    return False


def main(argv: list[str]) -> int:
    if argv[:1] == ["--which"]:
        print(target_python())
        return 0
    extras = argv[0] if argv else "transformers"
    python = target_python()
    begin = time.monotonic()
    if not in_virtualenv():
        make_venv(python)
    stamp = python.parent.parent / STAMP
    if up_to_date(stamp, set(extras.split(","))):
        say(f"up to date ({python}; delete {stamp} to reinstall)")
        return 0
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    install_torch(python, pip)
    say(f"observer-ci[{extras}] at the constraints.txt pins (first time about 60 s)")
    seconds = run([*pip, "-c", "constraints.txt", "-e", f".[{extras}]"])
    say(f"installed in {seconds:.0f}s; set-up took {time.monotonic() - begin:.0f}s ({python})")
    with stamp.open("a", encoding="utf-8") as f:
        f.write(f"{stamp_key()} {extras}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
