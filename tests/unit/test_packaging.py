"""action.yml, settings and the Dockerfile stay in step with each other."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text())


def test_every_action_input_is_read_and_every_read_input_is_declared():
    declared = set(action()["inputs"])
    source = (ROOT / "observer_ci" / "settings.py").read_text()
    read = {m.lower() for m in re.findall(r'"INPUT_([A-Z_]+)"', source)}
    assert declared == read
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", name) for name in declared)  # snake_case


def test_docker_action_uses_the_same_install_as_the_readme():
    spec = action()
    assert spec["runs"] == {"using": "docker", "image": "Dockerfile"}
    dockerfile = (ROOT / "Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "-c constraints.txt" in dockerfile and "-c constraints.txt" in makefile
    assert "[transformers]" in dockerfile and "'.[transformers]'" in makefile
    assert 'ENTRYPOINT ["python", "/action/entrypoint.py"]' in dockerfile


def test_constraints_pin_the_known_good_set():
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["torch"] == "2.13.0"
    assert pins["onnx"] == "1.23.2"
    assert pins["onnxruntime"] == "1.31.1"
    assert pins["onnxscript"] == "0.7.2"
    assert pins["transformers"] == "5.12.1"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make demo" in readme
    assert "make test" in ci
