"""Observation script: a tiny Mistral with a sliding window shorter than the prompt.

The sliding-window layers keep at most ``sliding_window - 1`` past positions: once the
prompt is longer than the window, the cache length is capped and never varies between
decode steps. The prefill has no cache at all and no empty form of a capped cache exists,
so the prefill gets its own graph (``decoder_model``) instead of becoming the export
sample with a made-up cache.
"""

import torch
from transformers import MistralConfig, MistralForCausalLM

import observer_ci

config = MistralConfig(
    vocab_size=256,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    sliding_window=4,
    pad_token_id=0,
)
torch.manual_seed(0)
model = MistralForCausalLM(config).eval()
with (
    torch.no_grad(),
    observer_ci.observe(
        model, name="mistral_sliding_window", store_n_calls=8, set_batch_dimension_for=True
    ),
):
    input_ids = torch.randint(2, 256, (2, 7))
    model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=False,
    )
