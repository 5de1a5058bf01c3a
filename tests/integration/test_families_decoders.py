"""Decoder-only ``generate()`` (GPT-2; Mistral with a sliding window capping the cache):
the prefill is the export sample, a capped cache is never a made-up sample."""

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from tests.support.families import (  # noqa: E402
    FAMILIES,
    assert_served_and_probed,
    run_examples,
)


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    scripts = ("gpt2_generate.py", "mistral_sliding_window.py")
    return run_examples(tmp_path_factory, *(FAMILIES / s for s in scripts))


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
    assert set(graphs) == {"decoder_model", "decoder_with_past_model", "decoder_model_merged"}
    assert "no empty form" in graphs["decoder_model"].reason
    assert graphs["decoder_model"].export.sample_index == 0
    assert graphs["decoder_with_past_model"].export.sample_index != 0
    assert not any(o.stand_ins for o in mistral.observations)
