"""The action's packaging stays in step: action.yml, the composite variant, the README's
table, settings, the Dockerfile's install (run here in a fresh virtual environment),
constraints and the workflows."""

from __future__ import annotations

import json
import os
import re
import shlex
import site
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement

from observer_ci.action.keep_installed import constraints_keeping_installed
from observer_ci.action.main import DEPRECATED_OUTPUTS
from observer_ci.action.settings import DEPRECATED_INPUTS
from tests.support import REPO_ROOT

ROOT = REPO_ROOT
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# One name for the action, its image, the package and the repository; OWNER is the repository's
# owner, the one part a fork that publishes its own releases changes (the README says so once).
NAME = "observer-ci"
OWNER = "observer-ci"


def load(path: str) -> dict:
    return yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))


def action() -> dict:
    return load("action.yml")


def composite() -> dict:
    return load("composite/action.yml")


def workflow(name: str) -> dict:
    data = load(f".github/workflows/{name}")
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def pins() -> dict[str, str]:
    return dict(
        line.strip().split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# -- action.yml, the composite variant, settings and the README ---------------------------


def test_every_action_input_is_read_and_every_read_input_is_declared():
    declared = set(action()["inputs"])
    source = (ROOT / "observer_ci" / "action" / "settings.py").read_text()
    read = {m.lower() for m in re.findall(r'"INPUT_([A-Z_]+)"', source)}
    assert declared == read
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", name) for name in declared)  # snake_case


def test_both_variants_share_inputs_and_outputs():
    image, local = action(), composite()
    assert local["inputs"] == image["inputs"]  # names, defaults, descriptions, deprecations
    assert list(local["outputs"]) == list(image["outputs"])
    for name, spec in local["outputs"].items():
        assert spec["description"] == image["outputs"][name]["description"]
        assert spec["value"] == f"${{{{ steps.observer.outputs.{name} }}}}"


def test_the_composite_runs_the_same_command_with_every_input_as_its_variable():
    steps = composite()["runs"]["steps"]
    (observer,) = [s for s in steps if s.get("id") == "observer"]
    # exec: the step's bash must not stay an ancestor holding INPUT_TOKEN in its environment
    assert observer["run"].strip() == "exec python -m observer_ci action"
    expected = {f"INPUT_{n.upper()}": f"${{{{ inputs.{n} }}}}" for n in action()["inputs"]}
    assert observer["env"] == expected
    entry = (ROOT / "entrypoint.py").read_text()
    assert "from observer_ci.action.main import main" in entry  # the image runs the same main


def test_the_composite_works_on_linux_macos_and_windows_runners():
    runs = composite()["runs"]
    assert runs["using"] == "composite"
    scripts = [s for s in runs["steps"] if "run" in s]
    assert scripts and all(s["shell"] == "bash" for s in scripts)  # bash on all three
    for step in scripts:
        syntax = subprocess.run(["bash", "-n", "-c", step["run"]], capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr
    text = "\n".join(s["run"] for s in scripts)
    for linux_only in ("apt-get", "sudo", "docker", "/usr/", "python3 "):
        assert linux_only not in text
    (install,) = [s for s in scripts if "pip install" in s["run"]]
    assert install["env"]["OBSERVER_CI_ROOT"] == "${{ github.action_path }}/.."
    assert "observer_ci.action.keep_installed" in install["run"]  # the user's torch is kept
    assert f"--extra-index-url {CPU_INDEX}" in install["run"]  # only when torch is missing
    (cache,) = [s for s in runs["steps"] if s.get("uses", "").startswith("actions/cache@")]
    assert cache["with"]["path"] == "${{ steps.python.outputs.pip_cache }}"
    assert "${{ runner.os }}" in cache["with"]["key"]


def test_publish_mode_needs_no_torch():
    text = composite()["runs"]["steps"][2]["run"]
    assert 'pip install --no-deps "$OBSERVER_CI_ROOT"' in text
    wanted = {
        normalise(line)
        for line in (ROOT / "requirements-publish.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    declared = {normalise(Requirement(r).name) for r in _project()["dependencies"]}
    assert wanted <= declared and not wanted & {"torch", "onnx", "onnxruntime", "onnxscript"}
    code = "import sys, observer_ci.action.publish, observer_ci.action.artifact\n" + (
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'transformers', 'pandas') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_readme_documents_every_input_in_one_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tables = re.findall(
        r"^\| input \| default \| meaning \|\n\|---\|---\|---\|\n((?:\|.*\n)+)", readme, re.M
    )
    assert len(tables) == 1
    rows = [re.match(r"^\| `(\w+)` \| (.*?) \| (.*) \|$", line) for line in tables[0].splitlines()]
    assert all(rows)
    documented = {m.group(1): m.group(2) for m in rows}
    inputs = action()["inputs"]
    assert list(documented) == list(inputs)
    for name, default in documented.items():
        expected = str(inputs[name].get("default", ""))
        expected = "github.token" if "github.token" in expected else expected
        assert default.strip("`") == (expected or '""'), name
    for output in action()["outputs"]:
        assert f"`{output}`" in readme


def test_metadata_is_short_and_unambiguous_and_old_names_are_deprecated():
    image, local = action(), composite()
    assert len(image["description"]) < 125 and len(local["description"]) < 125
    same_name = set(image["inputs"]) & set(image["outputs"])
    assert same_name <= set(DEPRECATED_INPUTS) & set(DEPRECATED_OUTPUTS)  # `comment`, going
    for old, new in DEPRECATED_INPUTS.items():
        spec = image["inputs"][old]
        assert new in image["inputs"] and new in spec["deprecationMessage"]
        assert spec["default"] == ""  # so a workflow that still sets it can be told apart
    for old, new in DEPRECATED_OUTPUTS.items():
        assert new in image["outputs"] and new in image["outputs"][old]["description"]


def test_keep_installed_pins_the_installed_torch_and_fills_in_what_is_missing():
    installed = {"torch": "2.9.1+cu128", "numpy": "1.26.4"}.get
    lines = ["# comment", "torch==2.13.0", "numpy==2.4.6", "onnx==1.23.2", ""]
    assert constraints_keeping_installed(lines, installed) == [
        "torch==2.9.1+cu128",  # never replaced
        "onnx==1.23.2",  # missing: the known-good pin
    ]  # numpy is installed: left to pip (kept if it satisfies observer-ci)


# -- the image ---------------------------------------------------------------------------------


def _dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def dockerfile_pip_installs() -> list[list[str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    commands = []
    for line in re.findall(r"^RUN (.*)$", text, re.M):
        for part in line.split("&&"):
            words = shlex.split(part)
            if words[:4] == ["python", "-m", "pip", "install"]:
                words = [re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], w) for w in words]
                commands.append(words[4:])
    return commands


def test_the_image_takes_cpu_torch_from_its_index_and_the_rest_from_the_constraints():
    torch_step, rest = dockerfile_pip_installs()
    assert torch_step == ["--no-deps", "--index-url", CPU_INDEX, f"torch=={pins()['torch']}+cpu"]
    assert rest == ["-c", "constraints.txt", ".[transformers]"]
    assert 'ENTRYPOINT ["python", "/action/entrypoint.py"]' in (ROOT / "Dockerfile").read_text()
    # what building the package reads is in the image (a missing license file fails the build)
    copies = re.findall(r"^COPY (.*) \./$", _dockerfile(), re.M)
    copied = {word for line in copies for word in line.split()}
    assert {"pyproject.toml", _project()["readme"], *_project()["license-files"]} <= copied


def test_one_name_across_action_image_package_and_readme():
    assert _project()["name"] == NAME and _project()["scripts"] == {NAME: "observer_ci.cli:command"}
    assert action()["name"] == NAME and composite()["name"].startswith(f"{NAME} ")
    assert action()["runs"] == {"using": "docker", "image": f"docker://ghcr.io/{OWNER}/{NAME}:v1"}
    release = workflow("release.yml")
    assert release["env"]["IMAGE"] == f"ghcr.io/${{{{ github.repository_owner }}}}/{NAME}"
    texts = {
        path: (ROOT / path).read_text(encoding="utf-8")
        for path in ("README.md", "SECURITY.md", "CHANGELOG.md", "Dockerfile")
    }
    texts |= {str(p.relative_to(ROOT)): p.read_text() for p in ROOT.glob("examples/workflows/*")}
    texts |= {str(p.relative_to(ROOT)): p.read_text() for p in ROOT.glob(".github/workflows/*")}
    for path, text in texts.items():
        uses = re.findall(r"\b([\w.-]+/[\w.-]+)(?:/composite)?@v1\b", text)
        images = re.findall(r"ghcr\.io/([\w.${} -]+?)/([\w.-]+)", text)
        assert set(uses) <= {f"{OWNER}/{NAME}"}, path
        assert {n for _, n in images} <= {NAME}, path
        assert "input-observer-action" not in text or path == "CHANGELOG.md", path  # its history
    readme = texts["README.md"]
    assert f"uses: {OWNER}/{NAME}@v1" in readme and f"uses: {OWNER}/{NAME}/composite@v1" in readme
    assert f"ghcr.io/{OWNER}/{NAME}" in readme and f"--owner {OWNER}" in texts["SECURITY.md"]


def _project() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _closure(extras: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of what observer-ci[extras] needs, from the installed metadata."""
    env = default_environment()
    found: dict[str, str] = {}
    todo = [(Requirement(r), extras) for r in _project()["dependencies"]]
    todo += [(Requirement(r), ()) for e in extras for r in _project()["optional-dependencies"][e]]
    while todo:
        req, _ = todo.pop()
        name = normalise(req.name)
        if name in found:
            continue
        dist = metadata.distribution(req.name)
        found[name] = dist.version
        for text in dist.requires or []:
            sub = Requirement(text)
            wanted = ("", *req.extras)
            if sub.marker is None or any(sub.marker.evaluate({**env, "extra": e}) for e in wanted):
                todo.append((sub, ()))
    return found


def see_this_environment(python: Path) -> None:
    """Makes the virtualenv of ``python`` see the packages of the environment running the
    tests (its site directories, their ``.pth`` files included), as ``--system-site-packages``
    would for the base interpreter: the project's ``.venv`` when ``make test`` made one, never
    the base interpreter's packages (an old setuptools, no torch)."""
    code = "import site, sys; print(site.getsitepackages()[0]); print(sys.prefix)"
    own = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    own_site = Path(own.stdout.splitlines()[0])
    lines = [f"import site; site.addsitedir({d!r})" for d in site.getsitepackages()]
    (own_site / "_observer_ci_test_env.pth").write_text("\n".join(lines) + "\n")


def test_the_nested_environment_sees_the_test_environment_not_the_base(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    see_this_environment(python)
    code = "import setuptools, torch; print(setuptools.__file__); print(torch.__file__)"
    seen = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    for line, module in zip(seen.stdout.splitlines(), ("setuptools", "torch")):
        here = Path(__import__(module).__file__).resolve()
        assert Path(line).resolve() == here, (module, line, here)


@pytest.fixture(scope="module")
def image_install(tmp_path_factory) -> dict:
    """The Dockerfile's second install step, run as the Dockerfile runs it, in a fresh
    virtual environment that sees this machine's packages (the CPU torch and the known-good
    set, as step one leaves the image) and no index: offline, it must install observer-ci
    and nothing else, so every pin agrees with what is installed."""
    _, rest = dockerfile_pip_installs()
    venv = tmp_path_factory.mktemp("image") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    see_this_environment(python)
    report = venv.parent / "report.json"
    offline = ["--no-index", "--no-build-isolation", "--quiet", "--report", str(report)]
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", *offline, *rest],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    help_text = subprocess.run(
        [str(python), "-m", "observer_ci", "--help"], capture_output=True, text=True, cwd=venv
    ).stdout
    return {"report": json.loads(report.read_text()), "venv": venv, "help": help_text}


def test_the_image_install_step_installs_only_observer_ci_over_the_pinned_set(image_install):
    installed = [i["metadata"]["name"] for i in image_install["report"]["install"]]
    assert installed == ["observer-ci"]
    assert "{run,compare,merge,action" in image_install["help"]


def test_the_composite_install_step_keeps_the_installed_torch(image_install, tmp_path):
    """The composite's install script itself (bash), in the same environment, offline."""
    steps = composite()["runs"]["steps"]
    (install,) = [s for s in steps if "pip install" in s.get("run", "")]
    venv = image_install["venv"]
    bin_dir = venv / ("Scripts" if sys.platform == "win32" else "bin")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PIP_")},
        "PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]]),
        "RUNNER_TEMP": str(tmp_path),
        "RUNNER_OS": "Linux",
        "OBSERVER_CI_ROOT": str(ROOT),
        "OBSERVER_CI_MODE": "run",
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",  # pip reads "0" as: no build isolation
    }
    proc = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", install["run"]], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    constraints = (tmp_path / "observer-ci-constraints.txt").read_text().split()
    # the rest is installed; mutmut belongs to the `mutation` extra, which nothing here installs
    constraints = [c for c in constraints if not c.startswith("mutmut==")]
    assert constraints == [f"torch=={metadata.version('torch')}"]
    assert "Successfully installed observer-ci" in proc.stdout
    assert "torch" not in proc.stdout.split("Successfully installed", 1)[1]


def test_every_package_of_the_image_is_pinned_at_the_version_installed(image_install):
    closure = _closure(("transformers",))
    pinned = {normalise(k): v for k, v in pins().items()}
    assert not [n for n in closure if n.startswith(("nvidia-", "triton"))]  # no CUDA stack
    assert closure["torch"] == pinned["torch"] + "+cpu"  # the Dockerfile's CPU build
    unpinned = sorted(set(closure) - set(pinned))
    assert unpinned == []
    wrong = {n: (v, pinned[n]) for n, v in closure.items() if n != "torch" and v != pinned[n]}
    assert wrong == {}


def test_constraints_pin_the_known_good_set():
    assert pins()["torch"] == "2.13.0"
    assert pins()["onnx"] == "1.23.2"
    assert pins()["onnxruntime"] == "1.31.1"
    assert pins()["onnxscript"] == "0.7.2"
    assert pins()["transformers"] == "5.12.1"


# -- workflows ------------------------------------------------------------------------------------


def test_ci_caches_pip_installs_the_cpu_wheel_and_runs_the_readme_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make demo" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    steps = workflow("ci.yml")["jobs"]["test"]["steps"]
    (setup,) = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
    assert setup["with"]["cache"] == "pip"
    assert "constraints.txt" in setup["with"]["cache-dependency-path"]
    runs = [s.get("run", "") for s in steps]
    assert "make test" in runs and not [r for r in runs if "torch==" in r]  # make installs it
    assert workflow("ci.yml")["env"]["TORCH_INDEX_URL"] == CPU_INDEX
    install = (ROOT / "tools" / "install.py").read_text()
    assert f'CPU_INDEX = "{CPU_INDEX}"' in install and "TORCH_INDEX_URL" in install


def test_the_publish_workflow_never_runs_pull_request_code():
    publish = workflow("observer-ci-publish.yml")
    assert publish["on"] == {"workflow_run": {"workflows": ["observer-ci"], "types": ["completed"]}}
    assert publish["permissions"] == {"actions": "read", "pull-requests": "write"}
    (job,) = publish["jobs"].values()
    steps = job["steps"]
    (download,) = [s for s in steps if s.get("uses", "").startswith("actions/download-artifact@")]
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    for step in steps:
        if step.get("uses", "").startswith("actions/checkout@"):  # this repository's action
            assert "ref" not in step.get("with", {}) and "repository" not in step.get("with", {})
        assert "run" not in step  # nothing executed but the action itself
    (publisher,) = [s for s in steps if s.get("with", {}).get("mode") == "publish"]
    assert download["with"]["path"] == "observer-ci-out/payload"
    assert publisher["uses"].endswith("/composite")


def test_the_pull_request_workflow_uploads_the_payload_without_a_write_token():
    pr = workflow("observer-ci.yml")
    assert pr["on"] == {"pull_request": None}
    assert pr["permissions"] == {"contents": "read"}
    steps = pr["jobs"]["observe"]["steps"]
    (observer,) = [s for s in steps if s.get("id") == "observer"]
    assert observer["with"]["post_comment"] == "false" and observer["uses"] == "./composite"
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == "observer-ci-out/payload"
    assert upload["with"]["name"].startswith("observer-ci-payload-")


# -- what is published (tools/check_dist.py, run by `make check-dist` in `make test`) -------------


def test_check_dist_finds_a_wrong_version_a_missing_license_and_stray_files(tmp_path):
    import io
    import tarfile
    import zipfile

    sys.path.insert(0, str(ROOT / "tools"))
    import check_dist

    version = check_dist.source_version()
    wheel = tmp_path / f"observer_ci-{version}-py3-none-any.whl"
    info = f"observer_ci-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(
            f"{info}/METADATA",
            "Metadata-Version: 2.4\nName: observer-ci\nVersion: 9.9.9\nLicense-Expression: MIT\n",
        )
        archive.writestr("observer_ci/__init__.py", "")
        archive.writestr("tests/test_x.py", "")
    sdist = tmp_path / f"observer_ci-{version}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        data = b"[project]\n"
        member = tarfile.TarInfo(f"observer_ci-{version}/pyproject.toml")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    failures = check_dist.check_metadata(wheel, sdist, version)
    assert f"wheel version 9.9.9 != __version__ {version}" in failures
    assert "wheel license MIT/None" in failures and "the wheel lacks LICENSE" in failures
    assert "the wheel holds more than the package: ['tests']" in failures
    assert {"the sdist lacks LICENSE", "the sdist lacks README.md"} <= set(failures)
    assert not [f for f in failures if "pyproject.toml" in f]  # this checkout's version is dynamic
    assert _project()["license"] == check_dist.LICENSE and "version" not in _project()


def test_bundles_travel_as_their_own_artifact_that_no_publish_job_downloads():
    """The reproducers are pull-request data: uploaded by the pull-request job (the composite
    itself; the image variant's examples by a step), never matched by a publish download."""
    import fnmatch

    from observer_ci.core.constants import BUNDLES_ARTIFACT

    def bundle_uploads(steps: list[dict]) -> list[dict]:
        return [s for s in steps if "bundles_path" in str(s.get("with", {}).get("path", ""))]

    uploads = bundle_uploads(composite()["runs"]["steps"])
    for name in ("observer-ci.yml", "fork-observe.yml"):
        example = load(f"examples/workflows/{name}")
        uploads += bundle_uploads(example["jobs"]["observe"]["steps"])
    assert len(uploads) == 3
    for step in uploads:
        assert step["uses"].startswith("actions/upload-artifact@")
        assert re.fullmatch(r"actions/upload-artifact@[0-9a-f]{40}", step["uses"])
        assert "bundles_path != ''" in step["if"]
        assert step["with"]["name"] == "${{ steps.observer.outputs.bundles_artifact }}"
    downloads = [
        s["with"].get("pattern") or s["with"].get("name")
        for path in (
            ".github/workflows/observer-ci-publish.yml",
            "examples/workflows/fork-publish.yml",
            "examples/workflows/matrix.yml",
        )
        for job in load(path)["jobs"].values()
        for s in job["steps"]
        if s.get("uses", "").startswith("actions/download-artifact@")
    ]
    assert downloads and all(d for d in downloads)
    for name in (BUNDLES_ARTIFACT, f"{BUNDLES_ARTIFACT}-py3.11"):
        assert not any(fnmatch.fnmatch(name, pattern) for pattern in downloads), name
