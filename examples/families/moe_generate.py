"""Observation script: ``generate()`` of a tiny random Qwen3-MoE (mixture of experts).

transformers runs the experts with ``grouped_mm`` by default, which has no ONNX
translation in torch.onnx. observer-ci switches them to ``batched_mm`` for the export
only (the model keeps ``grouped_mm`` for the observed calls and the torch reference) and
says so in the report: the script needs no change.
"""

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

import observer_ci

config = Qwen3MoeConfig(
    vocab_size=128,
    hidden_size=16,
    intermediate_size=32,
    moe_intermediate_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
    num_experts=4,
    num_experts_per_tok=2,
    decoder_sparse_step=1,
    max_position_embeddings=64,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
torch.manual_seed(0)
model = Qwen3MoeForCausalLM(config).eval()
observed = observer_ci.observe(
    model, name="tiny_qwen3_moe", store_n_calls=3, set_batch_dimension_for=True
)
with torch.no_grad(), observed:
    input_ids = torch.randint(3, 128, (2, 5))
    model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=3,
        min_new_tokens=3,
        do_sample=False,
    )
