"""Paired timing: base and head ONNX graphs run alternately on the head's saved inputs
(real ONNX files, real onnxruntime), and the latency rule uses the paired ratio."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from observer_ci.core.results import ModelResult, PairedLatency
from observer_ci.core.results import RunResults as Results  # noqa: N814
from observer_ci.pipeline.paired import (
    feeds_path,
    load_feeds,
    pair_results,
    save_feeds,
    save_feeds_within,
    time_pair,
)
from observer_ci.report.rules import Thresholds, compare
from tests.support.builders import export, model, observation


def graph(path, op: str, input_name: str = "x", repeat: int = 1) -> str:
    """y = x op x, ``repeat`` times in a chain (more nodes: slower)."""
    nodes, last = [], input_name
    for i in range(repeat):
        out = "y" if i == repeat - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [last, last], [out]))
        last = out
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", 64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
        ir_version=9,
    )
    onnx.save(model, str(path))
    return str(path)


def model_result(name: str, onnx_path: str, ort_s: float) -> ModelResult:
    return model(
        name,
        export=export(onnx_path=onnx_path, node_count=1),
        observations=[observation(0, ort=ort_s)],
    )


def test_feeds_round_trip_keeps_names_order_and_values(tmp_path):
    feeds = [{"b": np.ones((2, 3), np.float32), "a": np.arange(4)}, {"b": np.zeros((1, 3))}]
    path = save_feeds(feeds, tmp_path / "m.onnx")
    assert path == feeds_path(tmp_path / "m.onnx")
    loaded = load_feeds(path)
    assert [list(f) for f in loaded] == [["b", "a"], ["b"]]
    assert all(np.array_equal(f[k], g[k]) for f, g in zip(feeds, loaded) for k in f)


def test_saved_inputs_stop_at_the_runs_cap_with_a_note(tmp_path):
    call = {"x": np.ones((256, 1024), np.float32)}  # 1 MiB a call
    mb = 1 << 20
    assert save_feeds_within([call, call], tmp_path / "a.onnx", max_bytes=3 * mb) is None
    assert len(load_feeds(feeds_path(tmp_path / "a.onnx"))) == 2
    # a second model of the same run: 2 MiB are used, so one of its three calls fits
    note = save_feeds_within([call] * 3, tmp_path / "b.onnx", max_bytes=3 * mb + mb // 2)
    assert note is not None and "calls 1-2 not saved" in note and "calls 0-0 only" in note
    assert len(load_feeds(feeds_path(tmp_path / "b.onnx"))) == 1
    # a third finds no room: nothing saved, an earlier run's file for it removed
    stale = save_feeds([call], tmp_path / "c.onnx")
    note = save_feeds_within([call], tmp_path / "c.onnx", max_bytes=3 * mb)
    assert note is not None and "call 0 not saved" in note and "separate runs" in note
    assert not stale.exists()
    # the model's own earlier file does not count against it
    assert save_feeds_within([call], tmp_path / "a.onnx", max_bytes=4 * mb) is None


def test_a_slower_head_graph_has_a_ratio_above_one(tmp_path):
    base = graph(tmp_path / "base.onnx", "Add")
    head = graph(tmp_path / "head.onnx", "Mul", repeat=400)
    feeds = [{"x": np.random.rand(b, 64).astype(np.float32)} for b in (64, 128)]
    paired = time_pair(base, head, feeds, rounds=6, warmup=1, threads=1)
    assert paired.reason is None and (paired.calls, paired.rounds) == (2, 6)
    assert paired.ratio > 1.5 and paired.head_s > paired.base_s
    assert paired.ratio_low <= paired.ratio <= paired.ratio_high


def test_graphs_with_other_inputs_are_not_paired_and_say_why(tmp_path):
    base = graph(tmp_path / "base.onnx", "Add", input_name="input")
    head = graph(tmp_path / "head.onnx", "Add")
    paired = time_pair(base, head, [{"x": np.ones((1, 64), np.float32)}], rounds=2)
    assert paired.ratio is None and "other inputs" in paired.reason


def test_pair_results_fills_head_models_and_the_rule_uses_the_pair(tmp_path):
    base_path = graph(tmp_path / "base.onnx", "Add")
    head_path = graph(tmp_path / "head.onnx", "Add")
    save_feeds([{"x": np.ones((8, 64), np.float32)}], head_path)
    # separate runs disagree wildly (x10); the paired timing of identical graphs does not
    base = Results(models=[model_result("m", base_path, 0.001), model_result("gone", "", 1)])
    head = Results(models=[model_result("m", head_path, 0.010)])
    assert pair_results(base, head, rounds=8) == 1
    paired = head.models[0].paired_latency
    assert paired is not None and paired.ratio is not None and 0.2 < paired.ratio < 5
    th = Thresholds(latency_ratio_max=5.0, min_latency_s=0.0)
    assert not [r for r in compare(head, base, th, {"latency_ratio"}) if r.rule == "latency_ratio"]
    head.models[0].paired_latency = None  # without the pair, the separate runs trip the rule
    assert [r for r in compare(head, base, th, {"latency_ratio"}) if r.rule == "latency_ratio"]


def test_paired_latency_survives_results_json(tmp_path):
    head = Results(models=[model_result("m", "x.onnx", 0.1)])
    head.models[0].paired_latency = PairedLatency(ratio=1.2, base_s=1.0, head_s=1.2, rounds=3)
    head.write(tmp_path / "r.json")
    again = Results.read(tmp_path / "r.json").models[0].paired_latency
    assert again == head.models[0].paired_latency
