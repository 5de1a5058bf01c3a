"""SmolVLM (Idefics3) image-text ``generate()`` through ``observer-ci run``: 5-D
``pixel_values`` and a bool ``pixel_attention_mask``; batch 1 and 2, 1 and 2 images per
prompt (a batch padded with an all-zero image the model drops), prompt lengths, with and
without ``missing=``; every call of every graph within tolerance, every graph probed."""

from dataclasses import replace

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from observer_ci.pipeline.scripts import run_scripts  # noqa: E402
from tests.support.families import FAMILIES, FAST, assert_prefill_and_decode  # noqa: E402

IMAGE_INPUTS = ["pixel_values", "pixel_attention_mask"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("smolvlm")
    config = replace(FAST, cache_dir=str(out / "cache"))
    scripts = [FAMILIES / s for s in ("smolvlm_image_text.py", "smolvlm_image_counts.py")]
    return run_scripts(scripts, out, config=config, progress=lambda _message: None).by_name()


@pytest.mark.parametrize("suffix", ["", "_missing"])
def test_smolvlm_batch_2_one_image_each(models, suffix):
    prefill, decode = assert_prefill_and_decode(models[f"smolvlm_image_text{suffix}"], IMAGE_INPUTS)
    assert prefill.observation_indices == [0] and decode.observation_indices == [1, 2, 3]
    assert len(prefill.export.input_dims["pixel_values"]) == 5
    if suffix:
        assert "missing=" in decode.reason


def test_smolvlm_image_count_batch_and_padding_image_in_one_graph(models):
    """Before: the decode steps were fed 0-image stand-ins on one shared graph (the image
    count varied), whose export failed with an OverflowError (a size check against an
    integer past int64)."""
    model = models["smolvlm_varied"]
    prefill, decode = assert_prefill_and_decode(model, IMAGE_INPUTS)
    assert prefill.observation_indices == [0, 3, 6]
    dims = prefill.export.input_dims
    assert dims["pixel_values"][:2] == ["batch_size", dims["pixel_attention_mask"][1]]
    assert isinstance(dims["pixel_values"][1], str)  # images per prompt
    assert dims["pixel_values"][2:] == [3, 32, 32]


def test_smolvlm_two_images_each_with_missing(models):
    prefill, decode = assert_prefill_and_decode(models["smolvlm_two_images_missing"], IMAGE_INPUTS)
    assert prefill.export.input_dims["pixel_values"][:2] == [2, 2]
    assert "missing=" in decode.reason
