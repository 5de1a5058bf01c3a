"""Observation script: image-text ``generate()`` of a tiny random PaliGemma (SigLIP + Gemma).

The prefix (image tokens, then the prompt) passes ``pixel_values`` and ``token_type_ids``
with an empty cache (``decoder_model``); the decode steps pass the cache only
(``decoder_with_past_model``). Observed as is and with ``missing=``.
"""

import torch
from transformers import (
    GemmaConfig,
    PaliGemmaConfig,
    PaliGemmaForConditionalGeneration,
    SiglipVisionConfig,
)

import observer_ci

IMAGE_TOKEN, VOCAB, IMAGE_SIZE, PATCH = 99, 100, 16, 8
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH) ** 2
config = PaliGemmaConfig(
    vision_config=SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        projection_dim=32,
    ),
    text_config=GemmaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    ),
    image_token_index=IMAGE_TOKEN,
    projection_dim=32,
)
torch.manual_seed(0)
model = PaliGemmaForConditionalGeneration(config).eval()
prompt = torch.randint(3, 96, (2, 5))
input_ids = torch.cat([torch.full((2, TOKENS_PER_IMAGE), IMAGE_TOKEN), prompt], dim=1)
token_type_ids = torch.zeros_like(input_ids)  # the prefix: image and prompt
pixel_values = torch.randn(2, 3, IMAGE_SIZE, IMAGE_SIZE)
for name, missing in (
    ("paligemma_image_text", None),
    (
        "paligemma_image_text_missing",
        dict(pixel_values=torch.zeros_like(pixel_values), token_type_ids=token_type_ids),
    ),
):
    with torch.no_grad(), observer_ci.observe(model, name=name, store_n_calls=4, missing=missing):
        model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            token_type_ids=token_type_ids,
            pixel_values=pixel_values,
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
        )
