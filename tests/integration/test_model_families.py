"""Every model a user brings: vision, recurrent, dict arguments, ``*args``/``**kwargs``;
each exported, every call replayed, each graph probed (one run per group of scripts).
Encoder-decoder and decoder-only ``generate()``: test_families_seq2seq.py and
test_families_decoders.py."""

import sys

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from tests.support.families import (  # noqa: E402
    EXAMPLES,
    FAMILIES,
    assert_served_and_probed,
    run_examples,
)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    scripts = ("small_cnn.py", "lstm_tagger.py", "dict_batch.py")
    return run_examples(tmp_path_factory, *(EXAMPLES / s for s in scripts))


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


def test_plain_model_does_not_import_transformers(monkeypatch):
    import torch

    from observer_ci import InputObserver
    from observer_ci.observing.pytrees import (
        register_model_output_keys,
        register_transformers_pytrees,
    )

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
    return run_examples(tmp_path_factory, FAMILIES / "args_kwargs.py")


@pytest.mark.parametrize("name", ["star_args", "star_kwargs"])
def test_signature_families(signatures, name):
    assert_served_and_probed(signatures[name])
