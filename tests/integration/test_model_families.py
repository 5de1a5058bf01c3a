"""Every model a user brings: each example exported, every call replayed, each graph probed.

One run per group of scripts (module-scoped), fast timing settings.
"""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from observer_ci.results import STATUS_OK, RunResults  # noqa: E402
from observer_ci.run import RunConfig, run_scripts  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FAMILIES = EXAMPLES / "families"
FAST = RunConfig(warmup=0, repeat=1)


def quiet(_message: str) -> None:
    pass


def run(tmp_path_factory, *scripts: Path) -> dict:
    out = tmp_path_factory.mktemp("families")
    results = run_scripts(scripts, out, config=FAST, progress=quiet)
    return results.by_name()


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    scripts = ("small_cnn.py", "lstm_tagger.py", "dict_batch.py")
    return run(tmp_path_factory, *(EXAMPLES / s for s in scripts))


@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory):
    return run(tmp_path_factory, FAMILIES / "whisper_generate.py", FAMILIES / "t5_generate.py")


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    scripts = ("gpt2_generate.py", "mistral_sliding_window.py")
    return run(tmp_path_factory, *(FAMILIES / s for s in scripts))


def assert_served_and_probed(model) -> None:
    assert model.status == STATUS_OK, model.error
    assert model.graphs and model.export is model.graphs[0].export
    served = sorted(i for g in model.graphs for i in g.observation_indices)
    assert served == list(range(model.n_observations))  # every call has exactly one graph
    for row in model.observations:
        assert row.success and row.abs < 1e-4, row
        assert row.family in {g.name for g in model.graphs}
    for graph in model.graphs:
        assert graph.export.ok and Path(graph.export.onnx_path).is_file()
        assert graph.probe.ran and graph.probe.success, (graph.name, graph.probe)


@pytest.mark.parametrize("name", ["small_cnn", "lstm_tagger", "dict_forward", "dict_encode"])
def test_shipped_examples(shipped, name):
    model = shipped[name]
    assert_served_and_probed(model)
    assert [g.name for g in model.graphs] == ["model"]


def test_vision_and_recurrent_dims(shipped):
    cnn = shipped["small_cnn"].export.input_dims["images"]
    assert isinstance(cnn[0], str) and cnn[1] == 3 and all(isinstance(d, str) for d in cnn[2:])
    lstm = shipped["lstm_tagger"].export.input_dims["tokens"]
    assert all(isinstance(d, str) for d in lstm)


def test_dict_passed_positionally_keeps_its_parameter(shipped):
    for name in ("dict_forward", "dict_encode"):
        model = shipped[name]
        assert model.export.input_names == ["batch_ids", "batch_mask"], model.export
        assert model.export.failed_samples == []


@pytest.mark.parametrize("name", ["whisper_decoder", "t5_decoder"])
def test_encoder_decoder_generate_gets_one_graph_per_family(seq2seq, name):
    model = seq2seq[name]
    assert_served_and_probed(model)
    graphs = {g.name: g for g in model.graphs}
    assert set(graphs) == {"decoder_model", "decoder_with_past_model"}
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


def test_encoder_of_generate(seq2seq):
    model = seq2seq["whisper_encoder"]
    assert_served_and_probed(model)
    assert model.n_observations == 2 and model.export.input_names == ["input_features"]


def test_results_json_carries_families(seq2seq, tmp_path):
    path = RunResults(models=list(seq2seq.values())).write(tmp_path / "results.json")
    data = json.loads(path.read_text())
    whisper = next(m for m in data["models"] if m["name"] == "whisper_decoder")
    assert [g["name"] for g in whisper["graphs"]] == ["decoder_with_past_model", "decoder_model"]
    assert whisper["observations"][0]["family"] == "decoder_model"
    back = RunResults.read(path).by_name()["whisper_decoder"]
    assert back.graphs[1].export.onnx_path == seq2seq["whisper_decoder"].graphs[1].export.onnx_path
    assert back.graphs[1].probe.success


def test_decoder_only_generate_shares_one_graph(decoders):
    gpt2 = decoders["tiny_gpt2"]
    assert_served_and_probed(gpt2)
    assert [g.name for g in gpt2.graphs] == ["model"]
    # a prefill is the sample: no decode call (sequence length 1) is tried before it
    assert gpt2.export.sample_index == 0 and gpt2.export.failed_samples == []
    prefills = [o for o in gpt2.observations if o.stand_ins]
    assert [o.index for o in prefills] == [0]  # the prefill, empty cache
    assert all("0-length stand-ins" in o.note for o in prefills)


def test_capped_sliding_window_cache_is_never_a_made_up_sample(decoders):
    mistral = decoders["mistral_sliding_window"]
    assert_served_and_probed(mistral)
    graphs = {g.name: g for g in mistral.graphs}
    assert set(graphs) == {"decoder_model", "decoder_with_past_model"}
    assert "no empty form" in graphs["decoder_model"].reason
    assert graphs["decoder_model"].export.sample_index == 0
    assert graphs["decoder_with_past_model"].export.sample_index != 0
    assert not any(o.stand_ins for o in mistral.observations)


def test_plain_model_does_not_import_transformers(monkeypatch):
    import torch

    from observer_ci import InputObserver
    from observer_ci.pytrees import register_model_output_keys, register_transformers_pytrees

    # as in a script that never imported transformers (this process did, for other tests)
    for name in [m for m in sys.modules if m == "transformers" or m.startswith("transformers.")]:
        monkeypatch.delitem(sys.modules, name)
    model = torch.nn.Linear(3, 2)
    obs = InputObserver()
    with obs(model):
        model(torch.randn(2, 3))
        model(torch.randn(4, 3))
    assert obs.infer_dynamic_shapes() == ({0: torch.export.Dim.DYNAMIC},)
    assert register_transformers_pytrees() == [] and register_model_output_keys() == []
    assert "transformers" not in sys.modules


@pytest.fixture(scope="module")
def signatures(tmp_path_factory):
    # torch.onnx.InputObserver adoption: examples/torch_input_observer.py in
    # test_observer_signatures_export.py
    return run(tmp_path_factory, FAMILIES / "args_kwargs.py")


@pytest.mark.parametrize("name", ["star_args", "star_kwargs"])
def test_signature_families(signatures, name):
    assert_served_and_probed(signatures[name])
