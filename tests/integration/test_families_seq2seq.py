"""Encoder-decoder ``generate()`` (Whisper, T5): one graph per call family, named after the
Hugging Face exports, ``ModelOutput`` arguments flattened by key."""

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from observer_ci.core.results import RunResults  # noqa: E402
from tests.support.families import (  # noqa: E402
    FAMILIES,
    assert_served_and_probed,
    run_examples,
)


@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory):
    return run_examples(
        tmp_path_factory, FAMILIES / "whisper_generate.py", FAMILIES / "t5_generate.py"
    )


@pytest.mark.parametrize("name", ["whisper_decoder", "t5_decoder"])
def test_encoder_decoder_generate_gets_one_graph_per_family(seq2seq, name):
    model = seq2seq[name]
    assert_served_and_probed(model)
    graphs = {g.name: g for g in model.graphs}
    assert set(graphs) == {"decoder_model", "decoder_with_past_model", "decoder_model_merged"}
    # the first step of each generate (calls 0 and 4) has no cache yet
    assert graphs["decoder_model"].observation_indices == [0, 4]
    assert graphs["decoder_model"].reason
    for graph in graphs.values():
        assert Path(graph.export.onnx_path).name == f"{graph.name}.onnx"
        assert Path(graph.export.onnx_path).parent.name == name
        # BaseModelOutput flattened by key (``_orig``: the exporter's name for an input
        # also returned as an output)
        assert any(
            n.startswith("encoder_outputs_last_hidden_state") for n in graph.export.input_names
        )
    with_past = graphs["decoder_with_past_model"].export.input_names
    assert any(n.startswith("past_key_values_cross_attention_cache_key_") for n in with_past)
    assert not any("past_key_values" in n for n in graphs["decoder_model"].export.input_names)
    # the merged file takes every input plus the branch flag, and stores the weights once
    merged = graphs["decoder_model_merged"]
    assert merged.export.input_names == [*with_past, "use_cache_branch"]
    sizes = [graphs[n].export.file_size for n in ("decoder_model", "decoder_with_past_model")]
    assert max(sizes) < merged.export.file_size < sum(sizes)
    assert "initializers stored once" in merged.reason


def test_encoder_of_generate(seq2seq):
    model = seq2seq["whisper_encoder"]
    assert_served_and_probed(model)
    assert model.n_observations == 2 and model.export.input_names == ["input_features"]


def test_results_json_carries_families(seq2seq, tmp_path):
    path = RunResults(models=list(seq2seq.values())).write(tmp_path / "results.json")
    data = json.loads(path.read_text())
    whisper = next(m for m in data["models"] if m["name"] == "whisper_decoder")
    assert [g["name"] for g in whisper["graphs"]] == [
        "decoder_with_past_model",
        "decoder_model",
        "decoder_model_merged",
    ]
    assert whisper["observations"][0]["family"] == "decoder_model"
    back = RunResults.read(path).by_name()["whisper_decoder"]
    assert back.graphs[1].export.onnx_path == seq2seq["whisper_decoder"].graphs[1].export.onnx_path
    assert back.graphs[1].probe.success
