"""Observation script: ``generate()`` of a tiny random Mamba (a state-space model).

Mamba keeps no keys and values: each layer of its ``DynamicCache`` is a
``LinearAttentionLayer`` holding a convolution window (``conv_states``) and a recurrent
SSM state (``recurrent_states``), both of fixed size. The prefill starts from no state
and gets its own graph (``decoder_model``; Mamba's prefill loops over the prompt in
Python, so the graph serves the observed prompt length); the decode steps share
``decoder_with_past_model``, whose inputs and outputs include every layer's state
(``cache_params_conv_states_<i>``, ``cache_params_recurrent_states_<i>``).
"""

import torch
from transformers import MambaConfig, MambaForCausalLM

import observer_ci

config = MambaConfig(
    vocab_size=128,
    hidden_size=16,
    state_size=4,
    num_hidden_layers=2,
    expand=2,
    conv_kernel=4,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
torch.manual_seed(0)
model = MambaForCausalLM(config).eval()
with (
    torch.no_grad(),
    observer_ci.observe(model, name="tiny_mamba", store_n_calls=3, set_batch_dimension_for=True),
):
    input_ids = torch.randint(3, 128, (2, 3))
    model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=3,
        min_new_tokens=3,
        do_sample=False,
    )
