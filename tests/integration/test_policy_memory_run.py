"""``observer-ci run`` with a policy file that skips a model and gives outputs their own
tolerances, and the memory figures of the same run: real tiny models, real exports and
onnxruntime, the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from observer_ci.core.results import RunResults
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare

REPO = Path(__file__).resolve().parents[2]

# eager torch adds 1e-3 to the outputs named in ``shifted``; the exported graph does not
SCRIPT = """
import torch
import observer_ci

class TwoOutputs(torch.nn.Module):
    def __init__(self, shifted):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.shifted = shifted

    def forward(self, x):
        hidden = self.linear(x) + 5.0
        out = {"logits": hidden * 2.0, "hidden": hidden}
        if not torch.compiler.is_exporting():
            out = {k: v + 1e-3 if k in self.shifted else v for k, v in out.items()}
        return out

torch.manual_seed(0)
MODELS = {"logits_off": ("logits",), "both_off": ("logits", "hidden"), "huge_c": ()}
for name in NAMES:
    model = TwoOutputs(MODELS[name]).eval()
    with torch.no_grad(), observer_ci.observe(model, name=name):
        for batch in (2, 3):
            model(torch.randn(batch, 4))
"""

POLICY = """\
defaults:
  abs_max: 1e-5
models:
  "*_off":
    outputs:
      logits: {abs_max: 1e-2}
  huge_*:
    skip: "needs 40 GB; checked nightly"
  nothing_*:
    skip: "renamed long ago"
"""


def script(*names: str) -> str:
    return SCRIPT.replace("NAMES", repr(list(names)))


def observer_ci(cwd: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "observer_ci", "run", script, "--no-probe", *args]
    command += ["--out", "out", "--repeat", "1", "--warmup", "0"]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def green(tmp_path_factory):
    """logits_off (only its logits are off, held to 1e-2) and huge_c (skipped)."""
    folder = tmp_path_factory.mktemp("green")
    (folder / "observe.py").write_text(script("logits_off", "huge_c"))
    (folder / ".observer-ci.yml").write_text(POLICY)
    proc = observer_ci(folder, "observe.py", "--bundles", "all")
    results = json.loads((folder / "out/results.json").read_text())
    models = {m["name"]: m for m in results["models"]}
    return proc, models, (folder / "out/report.md").read_text(), folder / "out/results.json"


def test_a_skipped_model_is_not_run_shows_its_reason_and_the_gate_stays_green(green):
    proc, models, report, _ = green
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    skipped = models["huge_c"]
    assert skipped["status"] == "skipped"
    assert skipped["skip_reason"] == "needs 40 GB; checked nightly"
    assert skipped["export"] is None and skipped["observations"] == [] and not skipped["graphs"]
    assert skipped["n_observations"] == 2  # observed by the script, never exported
    assert "huge_c: skipped by the policy file (needs 40 GB" in proc.stderr
    assert "| ⏭️ skipped | huge_c | skipped: needs 40 GB; checked nightly |" in report
    assert "huge_c: skipped (needs 40 GB; checked nightly)" in report  # the legend


def test_a_skip_matching_no_model_is_a_warning(green):
    proc, _, report, _ = green
    assert r"⚠️ policy file: skip 'nothing\_\*' (renamed long ago) matched no model" in report
    assert "skip 'nothing_*' (renamed long ago) matched no model" in proc.stderr


def test_logits_pass_at_their_own_tolerance(green):
    _, models, report, _ = green
    model = models["logits_off"]
    assert model["status"] == "ok"
    for call in model["observations"]:
        assert call["success"] and call["abs"] == pytest.approx(1e-3, rel=0.05)
        assert call["output_errors"]["logits"][0] == pytest.approx(1e-3, rel=0.05)
        assert call["output_errors"]["hidden"][0] <= 1e-5
    legend = "logits_off: abs_max=1e-05, rel_max=0.1, outputs logits (abs_max=0.01, rel_max=0.1)"
    assert legend in report


def test_the_reproducer_replays_each_output_at_its_own_tolerance(green):
    *_, path = green
    (bundle,) = (path.parent / "bundles" / "logits_off").iterdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "observer_ci", "replay", str(bundle)]
    replayed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr  # max abs 1e-3 > 1e-5
    assert "max abs 0.001" in replayed.stdout and "OVER TOLERANCE" not in replayed.stdout


def test_another_output_of_the_same_model_fails_at_the_model_tolerance(tmp_path):
    (tmp_path / "observe.py").write_text(script("both_off"))
    (tmp_path / ".observer-ci.yml").write_text(POLICY)
    proc = observer_ci(tmp_path, "observe.py")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (model,) = json.loads((tmp_path / "out/results.json").read_text())["models"]
    assert model["status"] == "discrepancy"
    assert all(not call["success"] for call in model["observations"])
    assert "FAIL  both_off: discrepancy: output hidden: max abs error 0.001 > abs_max 1e-05" in (
        proc.stdout
    )
    assert "output logits" not in proc.stdout  # within its own 1e-2


def test_memory_figures_of_a_real_export_are_present_and_positive(green):
    _, models, report, path = green
    (graph,) = models["logits_off"]["graphs"]
    figures = graph["footprint"]
    assert figures["method"] in ("hwm", "sampled")
    assert figures["export_bytes"] > 0 and figures["session_seconds"] > 0
    for phase in ("export", "session", "run"):
        assert figures[f"{phase}_bytes"] >= 0
        assert figures[f"{phase}_peak"] > 50 << 20  # torch alone is resident
    # the once-per-process costs (~150 MB) were paid by the warm-up, not this first model
    assert figures["export_bytes"] < 64 << 20, figures
    peak = json.loads(path.read_text())["peak_rss_bytes"]
    assert peak >= max(figures[f"{p}_peak"] for p in ("export", "session", "run"))
    assert "**Memory** (added by each phase): export " in report


def test_memory_growth_is_flagged_against_a_baseline_with_smaller_figures(green):
    *_, path = green
    head, base = RunResults.read(path), RunResults.read(path)
    base.label = "base"
    for model in base.models:
        for graph in model.graphs:
            if graph.footprint is not None:
                graph.footprint.export_bytes = graph.footprint.export_bytes // 4
    th = Thresholds(min_memory_mb=0.0)  # a tiny model adds little: no floor here
    assert [r for r in compare(head, head, th, DEFAULT_FAIL_ON) if r.rule == "memory_growth"] == []
    found = [r for r in compare(head, base, th, DEFAULT_FAIL_ON) if r.rule == "memory_growth"]
    assert {r.model for r in found} == {"logits_off"}  # huge_c was skipped: no figures
    (reg,) = found
    assert not reg.fails_build and "peak memory grew (> ×1.5): export " in reg.message
    assert reg.head_value == head.by_name()["logits_off"].graphs[0].footprint.export_bytes
    report = render_report(head, found, base)
    assert "**Memory vs base** (added by each phase): export " in report
    assert [
        r for r in compare(head, base, Thresholds(), DEFAULT_FAIL_ON) if r.rule == "memory_growth"
    ] == []
