"""PaliGemma image-text ``generate()`` through ``observer-ci run``, as users vary it: batch
1 and 2, 1 and 2 images per prompt, prompt lengths 3 to 6 in one observation (one prefill
graph with those dims dynamic), with and without ``missing=``; every call of every graph
within tolerance, every graph probed."""

from dataclasses import replace

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from observer_ci.pipeline.scripts import run_scripts  # noqa: E402
from tests.support.families import FAMILIES, FAST, assert_prefill_and_decode  # noqa: E402

IMAGE_INPUTS = ["pixel_values"]  # token_type_ids: every step passes it


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("paligemma")
    config = replace(FAST, cache_dir=str(out / "cache"))
    scripts = [FAMILIES / s for s in ("paligemma_image_text.py", "paligemma_image_counts.py")]
    return run_scripts(scripts, out, config=config, progress=lambda _message: None).by_name()


@pytest.mark.parametrize("suffix", ["", "_missing"])
def test_paligemma_batch_2_one_image_each(models, suffix):
    model = models[f"paligemma_image_text{suffix}"]
    prefill, decode = assert_prefill_and_decode(model, IMAGE_INPUTS)
    assert prefill.observation_indices == [0] and decode.observation_indices == [1, 2, 3]
    assert prefill.export.input_dims["token_type_ids"][1] == "sequence_length"
    if suffix:
        assert "missing=" in decode.reason and "never ran on it" in decode.reason


def test_paligemma_image_count_batch_and_prompt_vary_in_one_graph(models):
    model = models["paligemma_varied"]
    prefill, decode = assert_prefill_and_decode(model, IMAGE_INPUTS)
    # three generate() calls: 1 image batch 1, 2 images batch 1, 1 image each batch 2
    assert prefill.observation_indices == [0, 3, 6]
    assert decode.observation_indices == [1, 2, 4, 5, 7, 8]
    dims = prefill.export.input_dims
    assert dims["input_ids"] == ["batch_size", "sequence_length"]
    assert isinstance(dims["pixel_values"][0], str)  # the number of images
    assert decode.export.input_dims["input_ids"] == ["batch_size", 1]


def test_paligemma_two_images_each_with_missing(models):
    model = models["paligemma_two_images_missing"]
    prefill, decode = assert_prefill_and_decode(model, ["pixel_values"])
    assert prefill.export.input_dims["pixel_values"][0] == 4  # 2 prompts x 2 images
    assert "missing=" in decode.reason
