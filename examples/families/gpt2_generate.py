"""Observation script: ``generate()`` of a tiny random GPT-2 (a second decoder-only family).

The prefill has an empty ``DynamicCache`` (fed as 0-length tensors), the decode steps a
growing one. One graph serves every call; the prefill is the export sample (sequence
length >= 2): decode calls (sequence length 1) are not tried first.
"""

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import observer_ci

config = GPT2Config(
    vocab_size=256,
    n_positions=64,
    n_embd=32,
    n_layer=2,
    n_head=2,
    n_inner=64,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=1,
)
torch.manual_seed(0)
model = GPT2LMHeadModel(config).eval()
with (
    torch.no_grad(),
    observer_ci.observe(model, name="tiny_gpt2", store_n_calls=4, set_batch_dimension_for=True),
):
    input_ids = torch.randint(2, 256, (2, 5))
    model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=False,
    )
