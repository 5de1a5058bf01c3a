"""The golden reports: four runs a reviewer meets (healthy, failing, with a baseline, merged
matrix legs), built from ``tests/support/builders.py`` and rendered as ``report.md``.

tests/unit/test_golden_reports.py compares them byte for byte with the files beside this
module; tests/render/ lays them out in a real browser. After a deliberate change of the
report, regenerate them and read the diff:

    python -m tests.golden.reports --write
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import NamedTuple

from observer_ci.core.constants import TORCH_NOT_REPRODUCIBLE
from observer_ci.core.legs import merge_results
from observer_ci.core.results import Cause, Diagnosis, ExportResult, PairedLatency, RunResults
from observer_ci.pipeline.causes import explain_exception
from observer_ci.report.markdown import render_report
from observer_ci.report.rules import DEFAULT_FAIL_ON, Thresholds, compare
from tests.support.builders import export, model, observation, run

HERE = Path(__file__).resolve().parent
RUN_URL = "https://github.com/octo/models/actions/runs/4242"
HEAD_SHA = "0123456789abcdef0123456789abcdef01234567"
BASE_SHA = "fedcba9876543210fedcba9876543210fedcba98"
ENV = {
    "torch": "2.13.0+cpu",
    "onnx": "1.23.2",
    "onnxruntime": "1.31.1",
    "onnxscript": "0.7.2",
    "python": "3.11.7",
    "cpu_count": 2,
    "torch_threads": 1,
}


class Golden(NamedTuple):
    head: RunResults
    base: RunResults | None


def _calls(
    ort: float, torch: float, n: int = 3, abs_: float = 2e-7, rel_per_abs: float = 10.0
) -> list:
    """``n`` matching calls whose timed runs spread -10%..+25% around ``ort`` and ``torch``."""
    spread = (0.9, 0.95, 1.0, 1.05, 1.25)
    return [
        observation(
            i,
            abs_=abs_ * (1 + i),
            rel=abs_ * rel_per_abs * (1 + i),
            ort=ort,
            torch_latency_s=torch,
            ort_latencies_s=[ort * f for f in spread],
            torch_latencies_s=[torch * f for f in spread],
        )
        for i in range(n)
    ]


def _healthy_models() -> list:
    return [
        model(
            "mlp_classifier",
            script="examples/mlp_classifier.py",
            export=export(seconds=1.42, node_count=9, input_dims={"x": ["batch", 16]}),
            observations=_calls(21e-6, 48e-6),
        ),
        model(
            "tiny_encoder",
            script="examples/tiny_encoder.py",
            export=export(
                seconds=3.87,
                node_count=164,
                input_names=["input_ids", "attention_mask"],
                input_dims={"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]},
            ),
            observations=_calls(0.41e-3, 1.35e-3),
        ),
        model(
            "llama_decoder",
            script="examples/llama_decoder.py",
            export=export(
                seconds=11.6,
                node_count=612,
                input_names=["input_ids", "past_key_values_key_cache_0"],
                input_dims={
                    "input_ids": ["batch", "seq"],
                    "past_key_values_key_cache_0": ["batch", 4, "past_seq", 8],
                },
            ),
            observations=_calls(2.3e-3, 241e-3),  # one slow eager median: a 1% ratio
        ),
    ]


def healthy() -> Golden:
    head = run(*_healthy_models(), env=ENV)
    head.commit = HEAD_SHA
    return Golden(head, None)


def failing() -> Golden:
    data_dependent = explain_exception(
        RuntimeError("GuardOnDataDependentSymNode: Could not guard on data-dependent expression")
    )
    broken = model(
        "router_moe",
        "export_failed",
        script="examples/router_moe.py",
        error=(
            "Traceback (most recent call last):\n"
            '  File "examples/router_moe.py", line 31, in forward\n'
            "    if scores.max() > 0.5:\n"
            "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode: "
            "Could not guard on data-dependent expression u0 > 0.5 (unhinted: u0 > 0.5)"
        ),
        export=ExportResult(ok=False, seconds=2.1, error="GuardOnDataDependentSymNode"),
        observations=[],
        probe=None,
        cause=Cause(
            data_dependent.kind,
            data_dependent.summary,
            data_dependent.next_step,
            "examples/router_moe.py:31: if scores.max() > 0.5:",
        ),
    )
    drifting = model(
        "fp16_attention",
        "discrepancy",
        script="examples/fp16_attention.py",
        export=export(
            seconds=4.2,
            node_count=88,
            input_dims={"q": ["batch", "heads", "seq", 64]},
            input_names=["q"],
        ),
        observations=_calls(0.9e-3, 2.2e-3, abs_=3.1e-3, rel_per_abs=100.0),
    )
    stateful = model(
        "stateful_block",
        "discrepancy",
        script="examples/stateful_block.py",
        observations=[
            dataclasses.replace(o, success=False) for o in _calls(0.2e-3, 0.5e-3, abs_=0.74)
        ],
        diagnosis=Diagnosis(
            torch_reproducible=False,
            torch_abs=0.74,
            torch_reason="the call changed state kept on the model: `block.calls` (int 9 → 10)",
            seconds=0.0188,
        ),
        cause=Cause(
            TORCH_NOT_REPRODUCIBLE,
            "torch does not reproduce its own recorded outputs: re-run on the inputs recorded "
            "for call 0, it differs from them by max abs 0.74, likely because the call changed "
            "state kept on the model: `block.calls` (int 9 → 10); the ONNX graph is compared "
            "with those outputs, so the exporter is not to blame",
            "keep forward free of state that changes its outputs (a call counter, a cache of "
            "the last input): reset it before each call or pass it as an input",
        ),
    )
    hostile = "see #12, GH-7 and octo/models#3 @octocat `rm -rf` $$OK$$ :tada: www.x.io deadbeef1"
    odd = model(
        "script with | pipes",
        "script_failed",
        script="examples/odd.py",
        error="ValueError: " + hostile,
        export=None,
        observations=[],
        probe=None,
        cause=Cause(
            "script_error",
            "the script raised ValueError: " + hostile,
            "fix the observation script, then run `observer-ci run examples/odd.py`",
        ),
    )
    head = run(broken, drifting, stateful, odd, *_healthy_models()[:1], env=ENV)
    head.commit = HEAD_SHA
    return Golden(head, None)


def with_baseline() -> Golden:
    base_models = _healthy_models()
    head_models = _healthy_models()
    # tiny_encoder: paired timing says head is 1.6x slower; llama_decoder: separate runs only
    head_models[1].observations = _calls(0.66e-3, 1.4e-3)
    head_models[1].paired_latency = PairedLatency(
        ratio=1.61,
        base_s=0.41e-3,
        head_s=0.66e-3,
        ratio_low=1.52,
        ratio_high=1.7,
        rounds=7,
        calls=3,
    )
    head_models[1].export = export(
        seconds=4.05,
        node_count=190,
        input_names=["input_ids", "attention_mask"],
        input_dims={"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]},
    )
    head_models[2].observations = _calls(2.2e-3, 250e-3)
    base = run(*base_models, label="base", env=ENV)
    base.commit = BASE_SHA
    head = run(*head_models, env=ENV)
    head.commit = HEAD_SHA
    return Golden(head, base)


def merged_legs() -> Golden:
    legs = []
    for label, scale, python in (("linux-py311", 1.0, "3.11.7"), ("macos-py312", 0.7, "3.12.4")):
        models = _healthy_models()[:2]
        for m in models:
            m.observations = [
                dataclasses.replace(o, ort_latency_s=o.ort_latency_s * scale)
                for o in m.observations
            ]
        leg = run(*models, label=label, env={**ENV, "python": python})
        leg.commit = HEAD_SHA
        legs.append(leg)
    head = merge_results(legs)
    head.commit = HEAD_SHA
    return Golden(head, None)


GOLDENS = {
    "healthy": healthy,
    "failing": failing,
    "with_baseline": with_baseline,
    "merged_legs": merged_legs,
}


def render(name: str) -> str:
    """The full ``report.md`` of golden ``name``, as ``write_report_files`` writes it."""
    golden = GOLDENS[name]()
    thresholds = Thresholds()
    regressions = compare(golden.head, golden.base, thresholds, set(DEFAULT_FAIL_ON))
    return render_report(
        golden.head,
        regressions,
        golden.base,
        max_chars=None,
        run_url=RUN_URL,
        thresholds=thresholds,
    )


def path(name: str) -> Path:
    return HERE / f"{name}.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render (and with --write, store) the goldens.")
    parser.add_argument("--write", action="store_true", help="rewrite tests/golden/*.md")
    parser.add_argument("--out", type=Path, help="write them into this folder instead")
    args = parser.parse_args(argv)
    folder = args.out or (HERE if args.write else None)
    for name in GOLDENS:
        text = render(name)
        if folder is None:
            sys.stdout.write(f"==> {name}.md\n{text}\n")
        else:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.md").write_text(text, encoding="utf-8")
            print(f"wrote {folder / f'{name}.md'} ({len(text):,} characters)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
