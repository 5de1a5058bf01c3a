"""What a reader of the report would otherwise trip over: skewed latency spreads, warnings
titled as regressions, empty base/head columns, derived dims, absent inputs, cryptic tensor
summaries, and "base **base**"."""

from __future__ import annotations

import re

import pytest

from observer_ci.core.results import InputInfo
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import Regression
from observer_ci.report.tables import format_seconds_range, readable_tensors
from tests.support.builders import export, model, observation, run


def test_a_skewed_spread_is_shown_as_its_range_not_as_plus_minus():
    calls = [observation(i, ort=1e-4, ort_latencies_s=[9e-5] * 8 + [1e-4, 1.2e-2]) for i in (0, 1)]
    text = render_report(run(model("m", observations=calls)), [])
    # p10 90 µs, p90 1.29 ms: "±" would claim a symmetric spread (and negative times)
    assert "| 100 µs (90 µs–1.29 ms) | 2 ms |" in text
    assert "±" not in text


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (1.9e-3, 2.1e-3, "1.9–2.1 ms"),
        (9.4e-4, 1.22e-3, "940 µs–1.22 ms"),
        (59, 61, "59 s–1 min 1 s"),
    ],
)
def test_a_range_names_its_unit_once_when_both_ends_share_it(low, high, expected):
    assert format_seconds_range(low, high) == expected


def test_warnings_alone_are_titled_warnings_without_empty_value_columns():
    warning = Regression("m", "stand_in_input", "call 0 did not pass memory", None, None, False)
    text = render_report(run(model("m")), [warning], run(model("m"), label="base"))
    assert re.search(r"### Warnings\n\n\|  \| model \| rule \| message \|\n(\|-+){4}\|\n", text)
    assert "| ⚠️ | m | stand_in_input | call 0 did not pass memory |" in text
    assert "### Regressions" not in text
    failing = Regression("m", "export_failed", "export failed", "ok", "export_failed", True)
    text = render_report(run(model("m")), [failing, warning], run(model("m"), label="base"))
    assert "### Regressions vs base\n\n|  | model | rule | base | head | message |" in text
    assert "| ⚠️ | m | stand_in_input | – | – | call 0 did not pass memory |" in text


def test_the_dynamic_dims_list_dims_not_expressions_of_them():
    dims = {"ids": ["batch", "seq"], "mask": ["batch", "past + seq"], "cache": ["batch", "past"]}
    text = render_report(run(model("m", export=export(input_dims=dims))), [])
    assert " · dynamic dims: batch, seq, past · " in text  # in the details' Export line
    only = {"mask": ["batch + 1"]}  # nothing else to show: the expression is kept
    text = render_report(run(model("m", export=export(input_dims=only))), [])
    assert " · dynamic dims: batch + 1 · " in text


def test_absent_inputs_scalars_dtypes_and_derived_dims_are_spelled_out():
    inputs = [InputInfo("memory", "torch.float32", [None, [3, 4], []], [])]
    dims = {"mask": ["batch", "past + seq"], "x": [-1, "s_1"]}
    text = render_report(run(model("m", inputs=inputs, export=export(input_dims=dims))), [])
    assert "| memory | float32 | not passed, 3×4, () |" in text
    assert "ONNX inputs: x (-1×s_1), mask (batch×(past + seq))" in text


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        ("dict(ids:T7s2x5,mask:T9sscalar)", "dict(ids:int64[2×5],mask:bool scalar)"),
        ("DynamicCache[T1s2x2x0x16]", "DynamicCache[float32[2×2×0×16]]"),
        ("T99s3 Tcomplex64s2 xT1s2", "T99[3] Tcomplex64s2 xT1s2"),  # unknown: left legible
    ],
)
def test_tensor_summaries_are_readable(summary, expected):
    assert readable_tensors(summary) == expected


def test_a_base_without_commit_or_label_is_the_base_run():
    text = render_report(run(model("m")), [], run(model("m"), label="base"))
    assert "Compared with the base run." in text and "**base**" not in text
    text = render_report(run(model("m")), [], run(model("m"), label="main"))
    assert "Compared with base **main**." in text


def test_without_base_the_legend_explains_no_base_columns():
    alone = render_report(run(model("m")), [])
    assert "×base" not in alone and "(+4)" not in alone and "vs base" not in alone
    assert "- **×torch**: ORT latency ÷ eager torch latency" in alone
    compared = render_report(run(model("m")), [], run(model("m"), label="base"))
    assert "- **×base**: head/base ORT latency" in compared and "×torch" not in compared
    assert "`(+4)` is the node count's change against base" in compared


def test_a_hostile_probe_shape_from_a_payload_stays_text():
    from observer_ci.core.results import ProbeResult

    probe = ProbeResult(ran=True, ok=True, success=True, shapes={"x": ["<img src=x>@a", 3]})
    text = render_report(run(model("m", probe=probe)), [])
    assert "<img" not in text and "@a" not in text
    assert "**Unseen-shape probe:** ✅ · x: (&lt;img src=x>@\u200da)×3" in text
