"""Observation script: SmolVLM ``generate()`` as users vary it, in one observation: 1 and
2 images per prompt, batch 1 and 2 (a batch whose prompts have 2 and 1 images: the
processor pads ``pixel_values`` with an all-zero image the model drops), prompt lengths;
then 2 images each with ``missing=``.
"""

import torch
from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

import observer_ci

VOCAB, IMAGE_TOKEN, IMAGE_SIZE, PATCH, SCALE, NEW_TOKENS = 100, 99, 32, 8, 2, 3
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH) ** 2 // SCALE**2
config = SmolVLMConfig(
    vision_config=dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
    ),
    text_config=dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=1,
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


def inputs(images: list[int], prompt: int) -> dict:
    """One row per prompt, ``images[i]`` images in row i (padded to the most with zeros)."""
    most = max(images)
    rows = []
    for count in images:
        text = torch.randint(3, 96, (prompt + (most - count) * TOKENS_PER_IMAGE,))
        image = torch.full((count * TOKENS_PER_IMAGE,), IMAGE_TOKEN)
        rows.append(torch.cat([text[:1], image, text[1:]]))
    input_ids = torch.stack(rows)
    pixel_values = torch.zeros(len(images), most, 3, IMAGE_SIZE, IMAGE_SIZE)
    pixel_attention_mask = torch.zeros(len(images), most, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.bool)
    for row, count in enumerate(images):
        pixel_values[row, :count] = torch.randn(count, 3, IMAGE_SIZE, IMAGE_SIZE)
        pixel_attention_mask[row, :count] = True
    return dict(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        pixel_values=pixel_values,
        pixel_attention_mask=pixel_attention_mask,
    )


def generate(**kwargs) -> None:
    model.generate(**kwargs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)


varied = [inputs([1], 3), inputs([2], 5), inputs([2, 1], 4)]
with torch.no_grad(), observer_ci.observe(model, name="smolvlm_varied", store_n_calls=9):
    for kwargs in varied:
        generate(**kwargs)

two = inputs([2, 2], 4)
missing = {k: torch.zeros_like(two[k]) for k in ("pixel_values", "pixel_attention_mask")}
observed = observer_ci.observe(
    model, name="smolvlm_two_images_missing", missing=missing, store_n_calls=3
)
with torch.no_grad(), observed:
    generate(**two)
