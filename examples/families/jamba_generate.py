"""Observation script: ``generate()`` of a tiny random Jamba (attention + Mamba layers,
mixture of experts), batch 2, with a padded prompt in a second call.

The prefill's ``_update_mamba_mask`` branches on ``torch.all(attention_mask == 1)``: while
exporting observer-ci keeps the mask (multiplying by ones is exact). The cache holds
key/value tensors for the attention layer and conv/SSM states for the Mamba layer.
"""

import torch
from transformers import JambaConfig, JambaForCausalLM

import observer_ci

config = JambaConfig(
    vocab_size=100,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    attn_layer_period=2,
    attn_layer_offset=1,
    expert_layer_period=2,
    expert_layer_offset=1,
    num_experts=2,
    num_experts_per_tok=1,
    mamba_d_state=4,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_dt_rank=4,
    use_mamba_kernels=False,
    max_position_embeddings=64,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
torch.manual_seed(0)
model = JambaForCausalLM(config).eval()
input_ids = torch.randint(3, 100, (2, 5))
observed = observer_ci.observe(
    model, name="tiny_jamba", store_n_calls=3, set_batch_dimension_for=True
)
with torch.no_grad(), observed:
    model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=3,
        min_new_tokens=3,
        do_sample=False,
    )
