"""Observation script: PaliGemma ``generate()`` as users vary it: 1 and 2 images per
prompt, batch 1 and 2, prompt lengths 3 to 6, in one observation (one prefill graph with
the batch, image count and prompt length dynamic), then 2 images each with ``missing=``.
"""

import torch
from transformers import (
    GemmaConfig,
    PaliGemmaConfig,
    PaliGemmaForConditionalGeneration,
    SiglipVisionConfig,
)

import observer_ci

IMAGE_TOKEN, VOCAB, IMAGE_SIZE, PATCH, NEW_TOKENS = 99, 100, 16, 8, 3
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH) ** 2
config = PaliGemmaConfig(
    vision_config=SiglipVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        projection_dim=16,
    ),
    text_config=GemmaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    ),
    image_token_index=IMAGE_TOKEN,
    projection_dim=16,
)
torch.manual_seed(0)
model = PaliGemmaForConditionalGeneration(config).eval()


def inputs(batch: int, images: int, prompt: int) -> dict:
    """Image tokens first (``images`` per prompt), then the prompt: PaliGemma's prefix."""
    image = torch.full((batch, images * TOKENS_PER_IMAGE), IMAGE_TOKEN)
    input_ids = torch.cat([image, torch.randint(3, 96, (batch, prompt))], dim=1)
    return dict(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        token_type_ids=torch.zeros_like(input_ids),
        pixel_values=torch.randn(batch * images, 3, IMAGE_SIZE, IMAGE_SIZE),
    )


def generate(**kwargs) -> None:
    model.generate(**kwargs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)


varied = [inputs(1, 1, 3), inputs(1, 2, 5), inputs(2, 1, 6)]
with torch.no_grad(), observer_ci.observe(model, name="paligemma_varied", store_n_calls=9):
    for kwargs in varied:
        generate(**kwargs)

two = inputs(2, 2, 4)
missing = dict(
    pixel_values=torch.zeros_like(two["pixel_values"]), token_type_ids=two["token_type_ids"]
)
observed = observer_ci.observe(
    model, name="paligemma_two_images_missing", missing=missing, store_n_calls=3
)
with torch.no_grad(), observed:
    generate(**two)
