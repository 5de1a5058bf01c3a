"""A hybrid cache (Gemma 2: sliding and full layers) whose sliding layer fills up during
the observed calls: the calls after that get a graph of their own."""

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

import torch  # noqa: E402

from observer_ci import observe  # noqa: E402
from observer_ci.observing.registry import take_registered  # noqa: E402
from observer_ci.pipeline.model_steps import process_model  # noqa: E402
from tests.support.families import FAST  # noqa: E402


def test_calls_after_the_sliding_window_fills_get_their_own_graph(tmp_path):
    # a prompt shorter than the window: the first decode steps see an uncapped sliding
    # layer, the later ones a capped one whose mask starts at an offset (before: those
    # calls were 0.1 off on the one shared graph)
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        sliding_window=4,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(0)
    model = Gemma2ForCausalLM(config).eval()
    with torch.no_grad(), observe(model, name="gemma2_short_prompt", store_n_calls=5):
        ids = torch.randint(3, 64, (2, 2))
        model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    (entry,) = take_registered()
    result = process_model(entry, tmp_path, config=FAST, progress=lambda _message: None)
    assert result.status == "ok", result.error
    assert all(o.success and o.abs < 1e-4 for o in result.observations)
    graphs = {g.name: g for g in result.graphs}
    assert graphs["model"].observation_indices == [0, 1, 2]
    full = graphs["with_past_window_full"]
    assert full.observation_indices == [3, 4] and "reached its window" in full.reason
    assert full.export.input_dims["past_key_values_key_cache_0"][2] == 3  # capped: static
    assert full.probe.ran and full.probe.success
    # beyond the window torch itself rejects the first graph's sizes: the probe says so
    assert graphs["model"].probe.ran or "torch rejected" in graphs["model"].probe.reason


def test_a_family_role_wins_over_the_cache_roles():
    from observer_ci.observing.families import ROLE_WINDOW_FULL, Family, name_families

    named = name_families(
        [
            Family("", [1, 2]),
            Family("", [3, 4], role=ROLE_WINDOW_FULL),
            Family("", [0], absent=["past_key_values_key_cache_0"]),
        ]
    )
    assert [f.name for f in named] == [
        "decoder_with_past_model",
        "with_past_window_full",
        "decoder_model",
    ]
