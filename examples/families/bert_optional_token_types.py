"""Observation script: a tiny random BERT encoder, ``token_type_ids`` left out in one call.

BERT reads an absent ``token_type_ids`` as zeros of the input's shape, not as an empty
tensor: the call without it does not match torch on the shared graph with an empty
stand-in, so it gets a graph of its own (``model_without_token_type_ids``). The ONNX
inputs are named after the ``forward`` parameters.
"""

import torch
from transformers import BertConfig, BertModel

import observer_ci

config = BertConfig(
    vocab_size=128,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=64,
)
torch.manual_seed(0)
model = BertModel(config).eval()
with torch.no_grad(), observer_ci.observe(model, name="bert_token_types", store_n_calls=3):
    for batch, length, with_types in ((2, 7, True), (3, 11, False), (1, 5, True)):
        input_ids = torch.randint(0, 128, (batch, length))
        kwargs = {"attention_mask": torch.ones_like(input_ids)}
        if with_types:
            kwargs["token_type_ids"] = torch.randint(0, 2, (batch, length))
        model(input_ids, **kwargs)
