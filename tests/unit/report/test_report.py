"""The Markdown PR comment: sections, escaping and fitting GitHub's size limit."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from observer_ci.core.results import (
    ExportResult,
    InputInfo,
    ModelResult,
    ObservationResult,
    ProbeResult,
    RunResults,
)
from observer_ci.report.escape import ZWJ
from observer_ci.report.markdown import (
    GITHUB_MAX_CHARS,
    MARKER,
    TRUNCATION_NOTE,
    format_bytes,
    format_float,
    format_seconds,
    render_report,
)
from observer_ci.report.rules import DEFAULT_FAIL_ON, Regression, Thresholds, compare

EVIL = "x|y<script>@octocat"
ENV = {
    "torch": "2.9.0",
    "onnx": "1.19.0",
    "onnxruntime": "1.22.1",
    "python": "3.11.9",
    "processor": "Intel Xeon",
    "cpu_count": 4,
    "torch_threads": 4,
}


def obs(i: int, ort: float = 1e-3) -> ObservationResult:
    return ObservationResult(
        index=i,
        ok=True,
        success=True,
        abs=3.2e-7,
        rel=1e-6,
        hist={">0.1": 0, ">1e-5": 1},
        torch_latency_s=2e-3,
        ort_latency_s=ort,
        inputs="dict(x:T1s2x8)",
        outputs="T1s2x4",
    )


def model(name: str = "tiny", status: str = "ok", error: str | None = None, ort: float = 1e-3):
    exported = status not in ("export_failed", "script_failed")
    return ModelResult(
        name=name,
        script="examples/tiny.py",
        status=status,
        error=error,
        n_observations=3,
        inputs=[InputInfo(EVIL, "float32", [[2, 8], [4, 8], [3, 8]], [0])],
        dynamic_shapes="{'x': {0: Dim('batch')}}",
        export=ExportResult(
            ok=exported,
            error=None if exported else error,
            seconds=2.5,
            opset=18,
            node_count=12,
            file_size=3 * 1024 * 1024,
            input_names=["x"],
            input_dims={"x": ["batch", 8]},
        ),
        observations=[obs(i, ort) for i in range(3)] if exported else [],
        probe=ProbeResult(ran=True, ok=True, success=True, shapes={"x": [5, 8]}, abs=1e-7),
        phase_seconds={"observe": 0.1, "export": 2.5},
    )


def tables(text: str) -> list[list[str]]:
    """Consecutive lines starting with ``|``."""
    found, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(current)
            current = []
    if current:
        found.append(current)
    return found


@pytest.fixture
def small():
    head = RunResults(
        models=[model("tiny", ort=2e-3), model("broken", "export_failed", "Traceback\nboom")],
        environment=ENV,
        label="head",
    )
    base = RunResults(models=[model("tiny"), model("broken")], environment=ENV, label="main")
    regs = compare(head, base, Thresholds(), DEFAULT_FAIL_ON)
    return head, base, regs


def test_small_report_leads_with_verdict_summary_and_regressions(small):
    head, base, regs = small
    head.commit, base.commit = "a" * 40, "b" * 40
    text = render_report(head, regs, base, run_url="https://github.com/o/r/actions/runs/1")
    lines = text.split("\n")
    assert lines[0] == MARKER
    assert lines[1] == "## ❌ observer-ci: 1 regression fails the build"
    assert lines[3] == "**2 models** · ✅ 1 ok · ❌ 1 export_failed · ⚠️ 1 warning  "
    assert lines[4] == (
        f"Head [`aaaaaaa`](https://github.com/o/r/commit/{'a' * 40}) vs base "
        f"[`bbbbbbb`](https://github.com/o/r/commit/{'b' * 40}) (main). "
        "[Workflow run](https://github.com/o/r/actions/runs/1)"
    )
    summary = tables(text)[0]
    # one line per cell: one latency and one ratio (†: separate runs), no ×1 noise
    assert summary[0] == "|  | model | export | worst abs | worst rel | ORT ×base | probe |"
    assert summary[2] == "| ❌ export_failed | broken | ❌ failed | – | – | – | ✅ |"
    assert summary[3] == "| ✅ | tiny | 2.5 s · 12 (+0) | 3.2e-07 | 1e-06 | 2 ms ×2† | ✅ |"
    first_details = text.index("<details>")
    assert text.index("| model |") < text.index("### Regressions vs base") < first_details
    assert text.index("How to read this report") < text.index("### Details")
    for piece in [
        "**Environment**: torch 2.9.0 · onnx 1.19.0 · ORT 1.22.1",
        "CPU Intel Xeon",
        "abs ≤ 0.001 and rel ≤ 0.1",
        "<details><summary>❌ broken · export_failed · examples/tiny.py</summary>",
        "<details><summary>✅ tiny · ok · examples/tiny.py</summary>",
        "| input | dtype | shapes seen | dynamic dims |",
        "2×8, 4×8, 3×8",
        "| call | abs | rel | hist | ORT | torch | SUCCESS |",
        "- call 0: dict(x:float32\\[2×8]) → float32\\[2×4]",
        "**Unseen-shape probe:** ✅ · x: 5×8",
        "**Export:** ✅ 2.5 s (×1) · opset 18 · 12 nodes · 3 MiB · dynamic dims: batch · "
        "ONNX inputs: x (batch×8)",
        "**Export:** ❌ failed",
        "<details><summary>Error</summary>",
        "boom",
    ]:
        assert piece in text, piece
    assert "&#95;" not in text
    assert TRUNCATION_NOTE not in text


def test_regressions_are_highlighted_failing_first(small):
    head, base, regs = small
    text = render_report(head, regs, base)
    section = text.split("### Regressions vs base")[1]
    rows = tables(section)[0][2:]
    assert rows[0].startswith("| ❌ | broken | export_failed | ok | export_failed |")
    assert rows[1].startswith("| ⚠️ | tiny | latency_ratio | 1 ms | 2 ms |")


def test_failing_models_are_listed_first(small):
    head, base, regs = small
    text = render_report(head, regs, base)
    details = text[text.index("### Details") :]
    assert details.index("broken ·") < details.index("tiny ·")
    summary = tables(text)[0]
    assert "broken" in summary[2] and "tiny" in summary[3]


def test_green_headline_without_base_has_no_regressions_section():
    head = RunResults(models=[model("a"), model("b")], environment=ENV)
    text = render_report(head, compare(head, None, Thresholds(), DEFAULT_FAIL_ON))
    assert text.startswith(MARKER + "\n## ✅ observer-ci: no regression fails the build")
    assert "**2 models** · ✅ 2 ok" in text
    assert "No baseline: absolute thresholds only." in text
    assert "### Regressions" not in text


def test_latency_spread_is_shown_from_the_timed_runs():
    m = model("tiny")
    for o in m.observations:
        o.ort_latencies_s = [0.9e-3, 1.0e-3, 1.0e-3, 1.1e-3, 1.3e-3]
    head = RunResults(models=[m], environment=ENV)
    text = render_report(head, [])
    # the summary: one number and its ratio to torch; the spread (p10 = 0.94 ms,
    # p90 = 1.22 ms) in the details
    assert "| 1 ms ×0.5 |" in tables(text)[0][2]
    assert "**Latency:** ORT 1 ms (940 µs–1.22 ms) · torch 2 ms · ORT/torch ×0.5" in text


def test_legend_states_the_thresholds_used():
    head = RunResults(models=[model("a")], environment=ENV)
    th = Thresholds(abs_max=2e-4, rel_max=0.05, latency_ratio_max=1.8)
    text = render_report(head, [], thresholds=th)
    assert "abs ≤ 0.0002 and rel ≤ 0.05" in text
    assert "latency may grow ×1.8" in text


def test_untrusted_names_cannot_break_tables_inject_html_or_mention():
    evil_error = "Traceback\n</pre><img src=x onerror=alert(1)>\n@octocat | `rm -rf` [x](y)"
    bad = model(EVIL, "export_failed", evil_error)
    head = RunResults(models=[model(EVIL), bad], environment={"torch": "<b>@admin</b>"})
    head.commit = "<b>not a sha</b>"
    regs = [Regression(EVIL, "export_failed", evil_error, None, EVIL, True)]
    text = render_report(head, regs, title="t<i>@x</i>")
    assert "<script>" not in text and "<img" not in text and "<b>" not in text
    assert "<i>" not in text
    assert not re.search(r"@(octocat|admin|x)", text)
    assert f"@{ZWJ}octocat" in text
    found = tables(text)
    assert len(found) >= 4
    for table in found:
        header_pipes = table[0].count("|") - table[0].count("\\|")
        assert all(row.count("|") - row.count("\\|") == header_pipes for row in table), table


def test_bad_run_url_is_dropped():
    head = RunResults(models=[model()])
    text = render_report(head, [], run_url="javascript:alert(1)")
    assert "javascript" not in text and "Workflow run" not in text


def test_300_models_with_long_errors_fit_the_limit():
    error = "Traceback (most recent call last):\n" + "  File 'x.py', line 1\n" * 2000 + "E: boom"
    models = [model(f"model_{i:03d}_" + "n" * 40, "export_failed", error) for i in range(300)]
    head = RunResults(models=models, environment=ENV)
    regs = compare(head, None, Thresholds(), DEFAULT_FAIL_ON)
    text = render_report(head, regs)
    assert len(text) <= GITHUB_MAX_CHARS
    assert text.startswith(MARKER + "\n")
    assert TRUNCATION_NOTE in text
    assert "## ❌ observer-ci: 300 regressions fail the build" in text
    assert "| ❌ export_failed | model_299_" in text  # the summary table survives


def test_detail_is_dropped_progressively(small):
    head, base, regs = small
    full = render_report(head, regs, base)
    less = render_report(head, regs, base, max_chars=len(full) - 1)
    assert len(less) <= len(full) - 1
    assert TRUNCATION_NOTE in less
    assert "dict(x:float32" not in less  # (1) per-call inputs/outputs go first
    assert "| SUCCESS |" in less  # but the per-call tables stay
    assert "shapes seen" in less


def test_minimal_level_keeps_verdict_summary_and_regressions():
    models = [model(f"m{i}", "export_failed", "x" * 5000) for i in range(20)]
    head = RunResults(models=models, environment=ENV)
    regs = compare(head, None, Thresholds(), DEFAULT_FAIL_ON)
    text = render_report(head, regs, max_chars=6000)
    assert len(text) <= 6000
    assert "### Regressions" in text
    assert "| ❌ export_failed | m0 | ❌ failed |" in text
    assert "shapes seen" not in text and "<details>" not in text
    assert text.rstrip().endswith(TRUNCATION_NOTE)


def test_rejects_non_positive_limit():
    with pytest.raises(ValueError, match="max_chars"):
        render_report(RunResults(), [], max_chars=0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "–"), (3.2e-7, "3.2e-07"), (0.0123, "0.0123"), (42, "42"), (float("nan"), "nan")],
)
def test_format_float(value, expected):
    assert format_float(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "–"),
        (0.0123, "12.3 ms"),
        (4.56e-6, "4.56 µs"),
        (2.5, "2.5 s"),
        (185, "3 min 5 s"),
        (3e-9, "3 ns"),
        (0, "0 s"),
    ],
)
def test_format_seconds(value, expected):
    assert format_seconds(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "–"),
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (3 * 1024**2, "3 MiB"),
        (5 * 1024**3, "5 GiB"),
    ],
)
def test_format_bytes(value, expected):
    assert format_bytes(value) == expected


def test_rendering_imports_neither_torch_nor_pandas():
    code = (
        "import sys\n"
        "from observer_ci.report.markdown import render_report\n"
        "from observer_ci.core.results import RunResults, ModelResult\n"
        "print('tabulate' in sys.modules)\n"
        "render_report(RunResults(models=[ModelResult('m', 's', 'ok')]), [])\n"
        "print(sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules))\n"
        "print('tabulate' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # tabulate is imported by the first table, not by importing the report
    assert out.stdout.split() == ["False", "[]", "True"]
