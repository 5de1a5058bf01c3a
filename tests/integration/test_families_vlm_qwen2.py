"""Qwen2-VL image-text ``generate()`` through ``observer-ci run``: the whole model exports
with the grid export patches (``image_grid_thw`` specialised to its one row, the number
of images dynamic) and the ``rope_deltas`` state recomputed from the positions; batch 1
and 2, 1 and 2 images, prompt lengths, 3-D positions from ``mm_token_type_ids``, with and
without ``missing=``, images of two resolutions in left-padded prompts; and the language
model observed alone."""

from dataclasses import replace

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from observer_ci.pipeline.scripts import run_scripts  # noqa: E402
from tests.support.families import (  # noqa: E402
    FAMILIES,
    FAST,
    PREFILL,
    assert_prefill_and_decode,
    assert_served_and_probed,
)

IMAGE_INPUTS = ["pixel_values"]
PATCHES = "Qwen2VisionTransformerPretrainedModel.forward"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen2_vl")
    config = replace(FAST, cache_dir=str(out / "cache"))
    scripts = [FAMILIES / s for s in ("qwen2_vl_image_text.py", "qwen2_vl_image_counts.py")]
    return run_scripts(scripts, out, config=config, progress=lambda _message: None).by_name()


def _patched(model):
    return any("export patches" in n and PATCHES in n for n in model.notes)


def test_qwen2_vl_whole_model_batch_2_two_images(models):
    """Before: export_failed (`.tolist()` on image_grid_thw in the vision position ids)."""
    model = models["qwen2_vl_image_text"]
    prefill, decode = assert_prefill_and_decode(model, IMAGE_INPUTS)
    assert prefill.observation_indices == [0] and decode.observation_indices == [1, 2, 3]
    assert "image_grid_thw" in prefill.export.input_names
    assert prefill.export.input_dims["position_ids"][0] == 4  # text + 3-D M-RoPE rows
    assert _patched(model)


def test_qwen2_vl_language_model_alone(models):
    assert_served_and_probed(models["qwen2_vl_language_model"])


def test_qwen2_vl_image_count_batch_and_prompt_vary_in_one_graph(models):
    model = models["qwen2_vl_varied"]
    # the probe's made-up pixel_values cannot match a grid torch accepts: said in its reason
    prefill, decode = assert_prefill_and_decode(model, IMAGE_INPUTS, unprobed=frozenset({PREFILL}))
    assert prefill.observation_indices == [0, 3, 6]
    dims = prefill.export.input_dims
    assert dims["input_ids"] == ["batch_size", "sequence_length"]
    assert isinstance(dims["pixel_values"][0], str) and isinstance(dims["image_grid_thw"][0], str)
    assert "mm_token_type_ids" in prefill.export.input_names
    assert _patched(model)


def test_qwen2_vl_two_images_each_with_missing(models):
    model = models["qwen2_vl_two_images_missing"]
    prefill, decode = assert_prefill_and_decode(model, IMAGE_INPUTS)
    assert prefill.export.input_dims["image_grid_thw"] == [4, 3]
    assert "missing=" in decode.reason


def test_qwen2_vl_two_resolutions_padded_prompts(models):
    """Grid rows that differ: the graph is specialised to the sample's whole grid."""
    model = models["qwen2_vl_two_resolutions"]
    prefill, _ = assert_prefill_and_decode(model, IMAGE_INPUTS)
    assert prefill.export.input_dims["image_grid_thw"] == [3, 3]
    assert _patched(model)
