"""Observation script: ``generate()`` of a tiny random Llama with a DynamicCache.

Needs the optional ``transformers`` extra. Weights are random (built from a config,
nothing is downloaded). observer-ci observes the prefill call (empty cache) and two
decode calls, infers dynamic sequence lengths for the ids, the mask and
every cache tensor (plus the batch, flagged), and exports one graph that serves both
prefill and decode.
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import observer_ci

config = LlamaConfig(
    vocab_size=1000,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
torch.manual_seed(0)
model = LlamaForCausalLM(config).eval()
input_ids = torch.randint(3, 1000, (2, 5))
# generate() keeps the batch size, so mark dim 0 of every input dynamic explicitly.
with (
    torch.no_grad(),
    observer_ci.observe(model, name="tiny_llama", store_n_calls=3, set_batch_dimension_for=True),
):
    model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=5,
        do_sample=False,
        pad_token_id=0,
    )
