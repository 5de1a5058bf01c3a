"""``observer-ci run`` with a policy file: two real models off by the same 1e-3, one held
to 1e-2 (passes), one to 1e-5 (fails), in one run; a malformed file stops before running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import torch
import observer_ci

class Off(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return y if torch.compiler.is_exporting() else y + 1e-3

torch.manual_seed(0)
for name in ("encoder_a", "plain_b"):
    model = Off().eval()
    with torch.no_grad(), observer_ci.observe(model, name=name):
        for batch in (2, 3):
            model(torch.randn(batch, 4))
"""

POLICY = "defaults:\n  abs_max: 1e-5\nmodels:\n  encoder_*:\n    abs_max: 1e-2\n"


def observer_ci(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "observer_ci", "run", "observe.py", "--no-probe", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


def test_each_model_is_held_to_its_own_tolerance(tmp_path):
    (tmp_path / "observe.py").write_text(SCRIPT)
    (tmp_path / ".observer-ci.yml").write_text(POLICY)
    proc = observer_ci(tmp_path, "--out", "out", "--repeat", "1", "--warmup", "0")
    assert proc.returncode == 1, proc.stderr[-2000:]
    models = {
        m["name"]: m for m in json.loads((tmp_path / "out/results.json").read_text())["models"]
    }
    assert models["encoder_a"]["status"] == "ok" and models["plain_b"]["status"] == "discrepancy"
    assert "FAIL  plain_b: discrepancy" in proc.stdout and "encoder_a:" not in proc.stdout
    assert "Policy file" in (tmp_path / "out/report.md").read_text()


def test_a_malformed_policy_exits_2_naming_file_and_line_before_running(tmp_path):
    (tmp_path / "observe.py").write_text(SCRIPT)
    (tmp_path / "policy.yml").write_text("models:\n  encoder_*:\n    abs_maxx: 1e-2\n")
    proc = observer_ci(tmp_path, "--out", "out", "--policy", "policy.yml")
    assert proc.returncode == 2
    assert "policy.yml:3: unknown key 'abs_maxx'" in proc.stderr and "valid keys" in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing ran
