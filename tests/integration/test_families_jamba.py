"""Jamba (attention + Mamba layers + experts) ``generate()`` through ``observer-ci run``:
the prefill's ``torch.all(attention_mask == 1)`` branch is exported with the mask kept
(an export patch); the decode graph takes and returns the key/value and conv/SSM states."""

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from tests.support.families import FAMILIES, assert_served_and_probed, run_examples  # noqa: E402


@pytest.fixture(scope="module")
def jamba(tmp_path_factory):
    return run_examples(tmp_path_factory, FAMILIES / "jamba_generate.py")["tiny_jamba"]


def test_jamba_prefill_exports_with_the_mask_kept(jamba):
    """Before: the prefill was export_failed (data-dependent branch on the mask)."""
    assert_served_and_probed(jamba)
    graphs = {g.name: g for g in jamba.graphs}
    assert set(graphs) == {"decoder_model", "decoder_with_past_model", "decoder_model_merged"}
    assert any("JambaModel._update_mamba_mask" in n for n in jamba.notes)
    past = graphs["decoder_with_past_model"].export.input_names
    for state in ("key_cache_0", "value_cache_0", "conv_states_0", "recurrent_states_0"):
        assert f"past_key_values_{state}" in past
