"""Reproducer bundles: a failing graph's file, feeds and torch outputs in the ONNX test-data
layout, replayed by ``observer-ci replay`` in a fresh process from another folder, and in a
fresh virtual environment holding the built wheel and only the replay's requirements."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from observer_ci.pipeline.bundle import BUNDLE_FILE, REPLAY_REQUIREMENTS, write_bundle
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.scripts import run_scripts

REPO = Path(__file__).resolve().parents[2]
FAST = RunConfig(warmup=0, repeat=1, probe=False)

SCRIPT = """
import torch
import observer_ci

class OffWhenExporting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 4)

    def forward(self, x):
        y = self.linear(x)
        if not torch.compiler.is_exporting():
            y = y + 0.25  # eager only: the graph never sees it
        return y

torch.manual_seed(0)
model, healthy = OffWhenExporting().eval(), torch.nn.Linear(6, 3).eval()
with torch.no_grad(), observer_ci.observe(model, name="off_when_exporting"):
    for batch in (2, 3):
        model(torch.randn(batch, 6))
with torch.no_grad(), observer_ci.observe(healthy, name="healthy"):
    for batch in (2, 3):
        healthy(torch.randn(batch, 6))
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle")
    script = root / "observe.py"
    script.write_text(SCRIPT)
    results = run_scripts([script], root / "out", config=FAST, progress=lambda _m: None)
    return root / "out", results.by_name()


def replay(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "observer_ci", "replay", str(folder), *extra]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_a_failing_graph_gets_a_bundle_a_healthy_one_none(run):
    out, models = run
    failing, healthy = models["off_when_exporting"], models["healthy"]
    assert failing.status == "discrepancy" and healthy.status == "ok"
    folder = out / "bundles" / "off_when_exporting" / "model"
    facts = json.loads((folder / BUNDLE_FILE).read_text())
    assert [c["call"] for c in facts["calls"]] == [0, 1] and facts["left_out"] == []
    assert (folder / "model.onnx").is_file()
    assert sorted(p.name for p in (folder / "test_data_set_0").iterdir()) == [
        "input_0.pb",
        "output_0.pb",
    ]
    assert any("reproducer: bundles/off_when_exporting/model" in n for n in failing.notes)
    assert not (out / "bundles" / "healthy").exists()


def test_replay_elsewhere_prints_the_same_discrepancy(run, tmp_path):
    out, models = run
    copy = tmp_path / "sent-by-a-user"
    shutil.copytree(out / "bundles" / "off_when_exporting" / "model", copy)
    proc = replay(copy)
    assert proc.returncode == 1, proc.stderr[-2000:]  # over the tolerance, as in CI
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and all("OVER TOLERANCE" in line for line in lines)
    recorded = {o.index: o.abs for o in models["off_when_exporting"].observations}
    for line in lines:
        call = int(line.split(":")[0].split()[1])
        now = float(line.split("max abs ")[1].split(",")[0])
        assert now == pytest.approx(recorded[call], rel=1e-6)


def test_an_unavailable_provider_and_a_graph_over_the_cap_are_usage_errors(run, tmp_path):
    out, models = run
    proc = replay(out / "bundles" / "off_when_exporting" / "model", "--provider", "tensorrt")
    assert proc.returncode == 2 and "not available in this onnxruntime" in proc.stderr
    graph = Path(models["off_when_exporting"].export.onnx_path)
    folder, used = write_bundle(
        tmp_path / "tiny",
        model="m",
        graph="model",
        onnx_path=graph,
        calls=[],
        output_names=[],
        tolerances={"abs_max": 1e-3, "rel_max": 1e-2},
        environment={},
        budget=10,
    )
    facts = json.loads((folder / BUNDLE_FILE).read_text())
    assert used == 0 and "over the 0 MB cap" in facts["left_out"][0]
    proc = replay(folder)
    assert proc.returncode == 2 and "holds no graph" in proc.stderr


def test_replay_in_a_fresh_virtualenv_without_torch_reproduces_the_max_abs(run, tmp_path):
    """The maintainer's path: the wheel built from this checkout installed with ``--no-deps``,
    then only :data:`REPLAY_REQUIREMENTS` (pip resolves them from the configured index, at
    the versions of constraints.txt), in a venv that sees none of this machine's packages."""
    out, models = run
    facts = json.loads((out / "bundles" / "off_when_exporting" / "model" / BUNDLE_FILE).read_text())
    assert facts["install"].startswith("pip install --no-deps observer-ci==")
    assert all(f" {name}==" in facts["install"] for name in REPLAY_REQUIREMENTS)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}

    def call(*command: str | Path) -> str:
        proc = subprocess.run(
            [str(c) for c in command], capture_output=True, text=True, env=env, cwd=tmp_path
        )
        assert proc.returncode in (0, 1), f"{command}: {proc.stdout[-1000:]}{proc.stderr[-2000:]}"
        return proc.stdout

    wheels = tmp_path / "wheels"
    pip_offline = ["--quiet", "--no-deps", "--no-index", "--no-build-isolation"]
    call(sys.executable, "-m", "pip", "wheel", *pip_offline, "-w", wheels, REPO)
    venv = tmp_path / "venv"
    call(sys.executable, "-m", "venv", "--without-pip", venv)  # this pip installs into it
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet"]
    call(*pip, "--no-deps", *wheels.glob("*.whl"))
    call(*pip, "-c", REPO / "constraints.txt", *REPLAY_REQUIREMENTS)
    probe = "import importlib.util as u, observer_ci as o; print(u.find_spec('torch'), o.__file__)"
    torch_spec, where = call(python, "-c", probe).split()
    assert torch_spec == "None" and where.startswith(str(venv))  # no torch, not this checkout
    copy = tmp_path / "sent-by-a-user"
    shutil.copytree(out / "bundles" / "off_when_exporting" / "model", copy)
    rows = json.loads(call(venv / "bin" / "observer-ci", "replay", "--json", copy))
    recorded = {o.index: o.abs for o in models["off_when_exporting"].observations}
    assert sorted(row["call"] for row in rows) == sorted(recorded) and recorded[0] > 0.1
    for row in rows:  # exact floats (the lines print 6 digits): 1e-6 relative is checkable
        assert not row["within"] and row["abs"] == pytest.approx(recorded[row["call"]], rel=1e-6)
