"""Observation script: image-text ``generate()`` of a tiny random LLaVA (CLIP + Llama).

The prefill passes ``pixel_values`` with an empty cache (``decoder_model``); the decode
steps pass the cache and no image (``decoder_with_past_model``). Observed twice: as is,
and with the reference observer's ``missing=`` for ``pixel_values``.
"""

import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

import observer_ci

IMAGE_TOKEN, VOCAB, IMAGE_SIZE, PATCH = 99, 100, 16, 8
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH) ** 2  # the CLS token is dropped
config = LlavaConfig(
    vision_config=CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        projection_dim=32,
    ),
    text_config=LlamaConfig(
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
    image_token_index=IMAGE_TOKEN,
    vision_feature_layer=-1,
)
torch.manual_seed(0)
model = LlavaForConditionalGeneration(config).eval()
text = torch.randint(3, 96, (2, 4))
image = torch.full((2, TOKENS_PER_IMAGE), IMAGE_TOKEN)
input_ids = torch.cat([text[:, :1], image, text[:, 1:]], dim=1)
pixel_values = torch.randn(2, 3, IMAGE_SIZE, IMAGE_SIZE)
for name, missing in (
    ("llava_image_text", None),
    ("llava_image_text_missing", dict(pixel_values=torch.zeros_like(pixel_values))),
):
    with torch.no_grad(), observer_ci.observe(model, name=name, store_n_calls=4, missing=missing):
        model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            pixel_values=pixel_values,
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
        )
