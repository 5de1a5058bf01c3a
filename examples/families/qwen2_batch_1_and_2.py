"""Observation script: two ``generate()`` calls of a tiny random Qwen2, batch 1 then 2.

Six calls are stored (``store_n_calls=6``): each generate's prefill (empty
``DynamicCache``, fed as 0-length tensors) and its two decode steps. The batch of 1 is
never the export sample (a size-1 dim would be baked in): the batch-2 prefill is, and one
graph serves every call with the batch, sequence and past lengths dynamic.
"""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import observer_ci

config = Qwen2Config(
    vocab_size=128,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=64,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=1,
)
torch.manual_seed(0)
model = Qwen2ForCausalLM(config).eval()
with torch.no_grad(), observer_ci.observe(model, name="qwen2_batch_1_and_2", store_n_calls=6):
    for batch, length in ((1, 5), (2, 8)):
        input_ids = torch.randint(2, 128, (batch, length))
        model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=3,
            min_new_tokens=3,
            do_sample=False,
        )
