"""Vision-language ``generate()`` (Gemma 3, LLaVA, ...) through the pipeline, with and
without the reference's ``missing=``: the prefill (image inputs, empty cache) and the
decode steps (cache, no image) each get the graph that serves them, every call matches."""

from dataclasses import replace

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from observer_ci.pipeline.scripts import run_scripts  # noqa: E402
from tests.support.families import FAMILIES, FAST, assert_prefill_and_decode  # noqa: E402


@pytest.fixture(scope="module")
def vlms(tmp_path_factory):
    out = tmp_path_factory.mktemp("vlm")
    # the export cache shares the graphs the two observations of a script have in common
    config = replace(FAST, cache_dir=str(out / "cache"))
    scripts = [FAMILIES / s for s in ("gemma3_image_text.py", "llava_image_text.py")]
    return run_scripts(scripts, out, config=config, progress=lambda _message: None).by_name()


@pytest.mark.parametrize("suffix", ["", "_missing"])
def test_gemma3_image_text_generate(vlms, suffix):
    prefill, decode = assert_prefill_and_decode(
        vlms[f"gemma3_image_text{suffix}"], ["pixel_values", "token_type_ids"]
    )
    assert prefill.export.input_dims["token_type_ids"][1] == "sequence_length"
    if suffix:
        assert "missing=" in decode.reason and "never ran on it" in decode.reason


@pytest.mark.parametrize("suffix", ["", "_missing"])
def test_llava_image_text_generate(vlms, suffix):
    assert_prefill_and_decode(vlms[f"llava_image_text{suffix}"], ["pixel_values"])
