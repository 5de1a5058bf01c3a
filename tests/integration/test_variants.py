"""Variants (fp16, int8, optimized) and providers, from the same observed calls: real
exports, real conversions, real onnxruntime sessions, the export cache."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from observer_ci.core.results import STATUS_OK, RunResults
from observer_ci.core.variants import PROVIDERS
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.scripts import run_scripts
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare, parse_fail_on
from tests.support import REPO_ROOT

ROOT = REPO_ROOT
OUTLIERS = ROOT / "tests" / "support" / "activation_outliers.py"
EXAMPLES = [ROOT / "examples" / "mlp_classifier.py", ROOT / "examples" / "small_cnn.py"]
MISSING = next(p for p, name in PROVIDERS.items() if name not in ort.get_available_providers())


def config(cache: Path, **fields) -> RunConfig:
    return RunConfig(
        warmup=1,
        repeat=3,
        cache_dir=str(cache),
        variants=("fp16", "int8", "optimized"),
        providers=("cpu", MISSING),
        **fields,
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def run(tmp_path_factory, cache) -> RunResults:
    out = tmp_path_factory.mktemp("variants")
    return run_scripts([OUTLIERS, *EXAMPLES], out, config=config(cache), progress=print)


def rows(run: RunResults, model: str) -> dict[tuple[str, str], object]:
    (graph,) = run.by_name()[model].graphs
    return {(v.variant, v.provider): v for v in graph.variants}


def test_int8_with_activation_outliers_is_flagged_with_numbers(run):
    bad, fine = rows(run, "outliers")[("int8", "cpu")], rows(run, "no_outliers")[("int8", "cpu")]
    assert bad.state == "exceeded tolerance" and bad.abs > 0.1, bad
    assert fine.state == "ok" and fine.abs < 0.1 and bad.abs > 20 * fine.abs, (bad, fine)
    assert bad.calls == 3 and bad.calls_within < 3
    # the float32 graph itself is fine: the model is ok, the variant is a warning
    assert run.by_name()["outliers"].status == STATUS_OK
    found = [r for r in compare(run, None, Thresholds(), DEFAULT_FAIL_ON) if r.model == "outliers"]
    (reg,) = [r for r in found if r.rule == "variant_discrepancy"]
    assert reg.message.startswith(f"int8 on cpu: max abs {bad.abs:.3g} > int8.abs_max 0.1")
    assert not reg.fails_build and reg.head_value == bad.abs
    gate = parse_fail_on("default,variant_discrepancy")
    assert any(r.fails_build for r in compare(run, None, Thresholds(), gate))
    # a wider tolerance clears it; the no-outlier twin never trips
    wide = Thresholds(int8_abs_max=10.0, int8_rel_max=1e4)
    assert not [r for r in compare(run, None, wide, gate) if r.model == "outliers"]
    assert not [r for r in found if r.model == "no_outliers"]


def test_fp16_of_a_classifier_passes(run):
    fp16 = rows(run, "mlp_classifier")[("fp16", "cpu")]
    assert fp16.state == "ok" and 0 < fp16.abs <= 1e-2 and fp16.calls_within == fp16.calls == 3
    assert fp16.probe_state == "success" and fp16.convert_s > 0 and fp16.file_size > 0
    assert fp16.latency_s > 0 and fp16.latency_ratio > 0
    assert Path(fp16.onnx_path).name == "mlp_classifier.fp16.onnx"
    regs = compare(run, None, Thresholds(), DEFAULT_FAIL_ON)
    assert not [r for r in regs if r.model == "mlp_classifier"]


@pytest.mark.parametrize("model", ["mlp_classifier", "small_cnn"])
def test_optimized_matches_on_the_examples(run, model):
    optimized = rows(run, model)[("optimized", "cpu")]
    reference = rows(run, model)[("float32", "cpu")]
    assert optimized.state == "ok" and optimized.abs <= 1e-4, optimized
    assert optimized.calls_within == optimized.calls == reference.calls == 3
    assert optimized.probe_state == "success"
    assert reference.latency_ratio == 1.0 and reference.state == "ok"


def test_an_unavailable_provider_is_a_skipped_row_never_a_failure(run):
    for model in ("mlp_classifier", "small_cnn", "outliers"):
        skipped = rows(run, model)[("float32, fp16, int8, optimized", MISSING)]
        assert skipped.state == "skipped"
        assert skipped.reason.startswith(
            f"skipped: {PROVIDERS[MISSING]} not available in this onnxruntime (installed: "
        )
        assert "CPUExecutionProvider" in skipped.reason
    assert run.by_name()["mlp_classifier"].status == STATUS_OK
    regs = compare(run, None, Thresholds(), parse_fail_on("all"))
    assert not [r for r in regs if r.model == "mlp_classifier"]
    text = render_report(run, regs, max_chars=None)
    assert f"| ⏭️ | float32, fp16, int8, optimized | {MISSING} | skipped: " in text
    header = next(line for line in text.splitlines() if line.startswith("|  | model |"))
    assert header.endswith("| probe | variants |")


def test_variants_survive_results_json(run, tmp_path):
    again = RunResults.read(run.write(tmp_path / "results.json"))
    assert rows(again, "outliers") == rows(run, "outliers")


def test_a_cache_hit_does_not_redo_the_export_and_still_checks_variants(run, cache, tmp_path):
    (model,) = run_scripts([EXAMPLES[0]], tmp_path, config=config(cache), progress=print).models
    assert model.export.cached, "the second run must restore the export from the cache"
    assert "variants" in model.phase_seconds
    now, before = rows(RunResults(models=[model]), "mlp_classifier"), rows(run, "mlp_classifier")
    assert set(now) == set(before)
    for key in (("optimized", "cpu"), ("fp16", "cpu"), ("int8", "cpu")):
        assert now[key].state == before[key].state == "ok"
        assert now[key].abs == pytest.approx(before[key].abs, rel=1e-3, abs=1e-6)


def test_without_variants_nothing_changes(tmp_path, cache):
    plain = RunConfig(warmup=1, repeat=3, cache_dir=str(cache), probe=False)
    (model,) = run_scripts([EXAMPLES[0]], tmp_path, config=plain, progress=print).models
    assert all(not g.variants for g in model.graphs) and "variants" not in model.phase_seconds
    text = render_report(RunResults(models=[model]), [], max_chars=None)
    header = next(line for line in text.splitlines() if line.startswith("|  | model |"))
    assert header.endswith("| probe |") and "**Variants" not in text
