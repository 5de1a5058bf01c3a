"""Shared by the model-family tests: run example scripts once per module, check a model
was exported, every call replayed within tolerance on its graph, and every graph probed."""

from __future__ import annotations

from pathlib import Path

from observer_ci.core.cache_inputs import is_media_input
from observer_ci.core.results import STATUS_OK, GraphResult, ModelResult
from observer_ci.pipeline.config import RunConfig
from observer_ci.pipeline.merged_decoder import MERGED_NAME
from observer_ci.pipeline.scripts import run_scripts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FAMILIES = EXAMPLES / "families"
FAST = RunConfig(warmup=0, repeat=1)


def run_examples(tmp_path_factory, *scripts: Path) -> dict[str, ModelResult]:
    """The models of ``scripts``, by name, from one run with fast timing settings."""
    out = tmp_path_factory.mktemp("families")
    results = run_scripts(scripts, out, config=FAST, progress=lambda _message: None)
    return results.by_name()


def assert_served_and_probed(model: ModelResult, unprobed: frozenset[str] = frozenset()) -> None:
    """``unprobed``: graphs whose probe may not run, when torch rejects every made-up size
    (Qwen2-VL's image prefill: patches and grid rows must agree); said in its reason."""
    assert model.status == STATUS_OK, model.error
    assert model.graphs and model.export is model.graphs[0].export
    families = [g for g in model.graphs if g.name != MERGED_NAME]
    served = sorted(i for g in families for i in g.observation_indices)
    assert served == list(range(model.n_observations))  # every call has exactly one graph
    for row in model.observations:
        assert row.success and row.abs < 1e-4, row
        assert row.family in {g.name for g in families}
    for graph in families:
        assert graph.export.ok and Path(graph.export.onnx_path).is_file()
        if graph.name in unprobed and not graph.probe.ran:
            assert "torch rejected it" in graph.probe.reason, graph.probe
        else:
            assert graph.probe.ran and graph.probe.success, (graph.name, graph.probe)
        assert graph.success and graph.abs == max(
            r.abs for r in model.observations if r.family == graph.name
        )
    merged = [g for g in model.graphs if g.name == MERGED_NAME]
    by_name = {g.name: g for g in families}
    pair = set(by_name) == {"decoder_model", "decoder_with_past_model"}
    only_first = (
        set(by_name["decoder_model"].export.input_names)
        - set(by_name["decoder_with_past_model"].export.input_names)
        if pair
        else set()
    )
    media = any(is_media_input(name) for name in only_first)
    if pair and not media:
        # a decoder and a decoder with past: one merged file as well (not when the first
        # step takes inputs the others never pass: a vision-language prefill's image)
        assert [g.name for g in merged] == [MERGED_NAME], [g.name for g in model.graphs]
        assert merged[0].success and merged[0].abs < 1e-4, merged[0]
        assert merged[0].observation_indices == served
        assert Path(merged[0].export.onnx_path).name == f"{MERGED_NAME}.onnx"
    else:
        assert not merged


PREFILL, DECODE = "decoder_model", "decoder_with_past_model"


def assert_prefill_and_decode(
    model: ModelResult, image_inputs: list[str], unprobed: frozenset[str] = frozenset()
) -> tuple[GraphResult, GraphResult]:
    """A vision-language generate(): the prefill graph takes the image inputs and no
    cache, the decode graph the cache and no image; no merged file; every call served."""
    assert_served_and_probed(model, unprobed)
    graphs = {g.name: g for g in model.graphs}
    assert list(graphs) == [PREFILL, DECODE]  # no merged file: the decode never has an image
    prefill, decode = graphs[PREFILL], graphs[DECODE]
    assert prefill.observation_indices[0] == 0
    served = sorted(prefill.observation_indices + decode.observation_indices)
    assert served == list(range(model.n_observations))
    for name in image_inputs:
        assert name in prefill.export.input_names and name not in decode.export.input_names
    assert not any(n.startswith("past_key_values") for n in prefill.export.input_names)
    assert any(n.startswith("past_key_values") for n in decode.export.input_names)
    # the prompt length stays dynamic in every input of the prefill, even those only it passes
    dims = prefill.export.input_dims
    assert dims["input_ids"][1] == "sequence_length"
    for name in image_inputs:
        assert name in dims
    return prefill, decode
