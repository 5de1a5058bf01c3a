"""Observation script: image-text ``generate()`` of a tiny random SmolVLM (Idefics3 family).

The prefill passes 5-D ``pixel_values`` (batch, images, channels, height, width) and a
bool ``pixel_attention_mask``; the decode steps pass the cache only. Observed as is and
with ``missing=``.
"""

import torch
from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

import observer_ci

VOCAB, IMAGE_TOKEN, IMAGE_SIZE, PATCH, SCALE = 100, 99, 32, 8, 2
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH) ** 2 // SCALE**2
config = SmolVLMConfig(
    vision_config=dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
    ),
    text_config=dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    ),
    image_token_id=IMAGE_TOKEN,
    scale_factor=SCALE,
    pad_token_id=0,
)
torch.manual_seed(0)
model = SmolVLMForConditionalGeneration(config).eval()
text = torch.randint(3, 96, (2, 4))
input_ids = torch.cat([text[:, :1], torch.full((2, TOKENS_PER_IMAGE), IMAGE_TOKEN), text[:, 1:]], 1)
pixel_values = torch.randn(2, 1, 3, IMAGE_SIZE, IMAGE_SIZE)
pixel_attention_mask = torch.ones(2, 1, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.bool)
missing = dict(
    pixel_values=torch.zeros_like(pixel_values), pixel_attention_mask=pixel_attention_mask
)
for name, fill in (("smolvlm_image_text", None), ("smolvlm_image_text_missing", missing)):
    with torch.no_grad(), observer_ci.observe(model, name=name, store_n_calls=4, missing=fill):
        model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            pixel_values=pixel_values,
            pixel_attention_mask=pixel_attention_mask,
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
        )
