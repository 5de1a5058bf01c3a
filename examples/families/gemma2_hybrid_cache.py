"""Observation script: ``generate()`` of a tiny random Gemma 2 (sliding and full layers).

Gemma 2 alternates sliding-window and full-attention layers. With a prompt longer than
the window, the sliding layer's cache is capped (``sliding_window - 1`` positions) while
the full layer's grows: a hybrid cache. The prefill gets its own graph
(``decoder_model``: a capped cache has no empty form); the decode steps share
``decoder_with_past_model``, whose capped layer learns how many tokens were seen (the
offset of its sliding mask) from the full layer.
"""

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

import observer_ci

config = Gemma2Config(
    vocab_size=128,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,  # layer 0 slides, layer 1 attends to everything
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
    sliding_window=4,
    max_position_embeddings=64,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
torch.manual_seed(0)
model = Gemma2ForCausalLM(config).eval()
with torch.no_grad(), observer_ci.observe(model, name="gemma2_hybrid", store_n_calls=4):
    input_ids = torch.randint(3, 128, (2, 7))
    model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=False,
    )
