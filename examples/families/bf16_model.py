"""Observation script: one tiny random Llama in bfloat16, in float16 and in float32.

onnxruntime's CPU provider has no bfloat16 kernels for MatMul / Gemm: the bfloat16 graph
exports but cannot run there, and the row says so (``ort_failed``, the operator, the
dtype) with the next step: check ``model.float()``, the third model here, which passes.
The float16 graph runs on the CPU; it is compared at float16's tolerance (stated in the
report), since float16 rounding alone exceeds float32's ``abs_max``.
"""

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import observer_ci

config = LlamaConfig(
    vocab_size=128,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
    max_position_embeddings=64,
    use_cache=False,  # forward calls without a cache (a call's use_cache= is not exported)
)
torch.manual_seed(0)
base = LlamaForCausalLM(config).eval()
models = {
    "tiny_llama_bf16": copy.deepcopy(base).to(torch.bfloat16),
    "tiny_llama_fp16": copy.deepcopy(base).to(torch.float16),
    "tiny_llama_bf16_as_float32": copy.deepcopy(base).to(torch.bfloat16).float(),
}
for name, model in models.items():
    with torch.no_grad(), observer_ci.observe(model, name=name, store_n_calls=2):
        for batch, length in ((1, 4), (2, 6)):
            input_ids = torch.randint(3, 128, (batch, length))
            model(input_ids, attention_mask=torch.ones_like(input_ids))
