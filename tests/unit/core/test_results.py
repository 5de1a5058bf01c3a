"""results.json schema helpers."""

import math

import pytest

from observer_ci.core.errors import error_headline
from observer_ci.core.results import (
    ModelResult,
    ObservationResult,
    RunResults,
)
from observer_ci.report.rules import worst_error

EXPORT_ERROR = """TorchExportError: Failed to export the model with torch.export. This is step 1/3.
- Modify the model code.

## Exception summary

<class 'GuardOnDataDependentSymNode'>: Could not guard on data-dependent expression Eq(u0, 1)

For more information, run with TORCH_LOGS="dynamic"
(Refer to the full stack trace above for more information.)"""


def test_error_headline_prefers_the_exception_summary():
    assert error_headline(EXPORT_ERROR).startswith("<class 'GuardOnDataDependentSymNode'>")


def test_error_headline_takes_the_last_meaningful_line_of_a_traceback():
    tb = 'Traceback (most recent call last):\n  File "s.py", line 1\nValueError: boom\n'
    assert error_headline(tb) == "ValueError: boom"
    assert error_headline("x" * 500, limit=50).endswith("…")
    assert error_headline(None) == ""


def test_nan_is_never_hidden_by_a_smaller_error():
    model = ModelResult(
        name="m",
        script="s.py",
        status="discrepancy",
        observations=[
            ObservationResult(index=0, ok=True, abs=1e-7),
            ObservationResult(index=1, ok=True, abs=math.nan),
        ],
    )
    assert math.isnan(worst_error(model, "abs"))
    assert worst_error(model, "rel") is None


def test_json_round_trip_keeps_nan_inf_and_notes(tmp_path):
    model = ModelResult(
        name="m",
        script="s.py",
        status="discrepancy",
        notes=["training mode"],
        observations=[ObservationResult(index=0, ok=True, abs=math.inf, rel=math.nan)],
    )
    path = RunResults(models=[model], label="head").write(tmp_path / "r.json")
    assert '"inf"' in path.read_text()  # valid JSON: no bare Infinity / NaN
    back = RunResults.read(path).models[0]
    assert back.notes == ["training mode"]
    assert math.isinf(back.observations[0].abs) and math.isnan(back.observations[0].rel)


def test_unreadable_results_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        RunResults.read(bad)
    bad.write_text("[]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        RunResults.read(bad)


def test_one_reader_strict_for_untrusted_payloads_lenient_for_our_own_files():
    from observer_ci.core.exceptions import ResultsSchemaError
    from tests.support.builders import export, model, run

    data = run(model(export=export(node_count=12))).to_dict()
    data["models"][0]["export"]["node_count"] = "12"
    data["models"][0]["added_by_a_newer_release"] = True
    lenient = RunResults.from_dict(data)  # our own file: unknown keys ignored, values kept
    assert lenient.models[0].export.node_count == "12"
    with pytest.raises(ResultsSchemaError, match=r"models\[0\]\.export has the wrong type"):
        RunResults.from_dict(data, strict=True)
    data["models"][0]["export"]["node_count"] = 12
    data["models"][0]["status"] = "fine"
    with pytest.raises(ResultsSchemaError, match=r"models\[0\]\.status is not a known status"):
        RunResults.from_dict(data, strict=True)
