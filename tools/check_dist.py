"""Check what would be published (``make check-dist``, part of ``make test``).

1. ``python -m build`` makes one sdist and one wheel (without build isolation: the pinned
   setuptools, no network);
2. ``twine check --strict`` passes on both (metadata, the README as the long description);
3. the version has one source: the wheel says ``observer_ci.__version__`` and
   ``pyproject.toml`` declares it dynamic; the license is ``Apache-2.0`` with its file;
4. the wheel holds the package and nothing else (no tests, no tools);
5. the wheel alone (``pip install --no-deps --no-index``) in a fresh virtual environment, which
   sees none of this machine's packages, runs ``observer-ci --help`` (the command line needs
   only the standard library), importing the installed copy, not this checkout.

Exit status 1 with one line per failed check.
"""

from __future__ import annotations

import ast
import email
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
LICENSE = "Apache-2.0"


def source_version() -> str:
    tree = ast.parse((ROOT / "observer_ci" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__version__":
            return str(ast.literal_eval(node.value))
    raise SystemExit("check-dist: no __version__ in observer_ci/__init__.py")


def run(*command: str | Path, cwd: Path = ROOT, env: dict | None = None) -> str:
    proc = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"check-dist: {' '.join(map(str, command))} failed:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout


def check_metadata(wheel: Path, sdist: Path, version: str) -> list[str]:
    """Failures of checks 3 and 4 on the built files."""
    failures = []
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if "version" in project or "version" not in project.get("dynamic", []):
        failures.append("pyproject.toml: the version must be dynamic (observer_ci.__version__)")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(archive.read(meta_name))
    if meta["Version"] != version:
        failures.append(f"wheel version {meta['Version']} != __version__ {version}")
    if meta["License-Expression"] != LICENSE or meta["License-File"] != "LICENSE":
        failures.append(f"wheel license {meta['License-Expression']}/{meta['License-File']}")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        failures.append("the wheel lacks LICENSE")
    stray = sorted({n.split("/")[0] for n in names} - {"observer_ci", meta_name.split("/")[0]})
    if stray:
        failures.append(f"the wheel holds more than the package: {stray}")
    with tarfile.open(sdist) as archive:
        top = f"observer_ci-{version}"
        members = set(archive.getnames())
    for needed in ("LICENSE", "README.md", "pyproject.toml", "observer_ci/__init__.py"):
        if f"{top}/{needed}" not in members:
            failures.append(f"the sdist lacks {needed}")
    return failures


def check_fresh_install(wheel: Path, work: Path, version: str) -> list[str]:
    """Failures of check 5: the wheel alone in a fresh virtual environment."""
    venv = work / "venv"
    run(sys.executable, "-m", "venv", venv)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env = {k: v for k, v in env.items() if not k.startswith("PIP_")}
    python = bin_dir / "python"
    run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheel, env=env)
    failures = []
    code = "import observer_ci as o; print(o.__file__, o.__version__)"
    where = run(python, "-c", code, cwd=work, env=env).split()
    if not where[0].startswith(str(venv)) or where[1] != version:
        failures.append(f"the fresh venv imports {where}, not the installed wheel")
    help_text = run(bin_dir / "observer-ci", "--help", cwd=work, env=env)
    if not help_text.startswith("usage: observer-ci"):
        failures.append(f"observer-ci --help printed {help_text[:200]!r}")
    return failures


def main() -> int:
    version = source_version()
    with tempfile.TemporaryDirectory(prefix="observer-ci-dist-") as tmp:
        work = Path(tmp)
        dist = work / "dist"
        run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT)
        wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
        if [w.name for w in wheels] != [f"observer_ci-{version}-py3-none-any.whl"] or len(
            sdists
        ) != 1:
            built = sorted(p.name for p in dist.iterdir())
            print(f"check-dist: expected one wheel and one sdist of {version}, built {built}")
            return 1
        run(sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists)
        failures = check_metadata(wheels[0], sdists[0], version)
        failures += check_fresh_install(wheels[0], work, version)
    for failure in failures:
        print(f"check-dist: {failure}")
    if not failures:
        print(f"check-dist: {version}: sdist and wheel, twine check, the wheel alone runs --help")
    return int(bool(failures))


if __name__ == "__main__":
    sys.exit(main())
