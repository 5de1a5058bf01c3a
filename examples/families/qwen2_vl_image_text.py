"""Observation script: image-text ``generate()`` of a tiny random Qwen2-VL.

The prefill passes flattened patches (``pixel_values``: patches x channels*patch area) and
``image_grid_thw`` (one (t, h, w) row per image); the positions are 3-D (M-RoPE). The
decode steps pass the cache (and the grid) only.
"""

import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

import observer_ci

VOCAB, IMAGE_TOKEN, VISION_START, VISION_END = 100, 97, 98, 99
config = Qwen2VLConfig(
    text_config=dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    ),
    vision_config=dict(
        depth=1,
        embed_dim=32,
        hidden_size=32,
        num_heads=2,
        mlp_ratio=2,
        patch_size=4,
        spatial_merge_size=2,
        temporal_patch_size=2,
        in_channels=3,
    ),
    image_token_id=IMAGE_TOKEN,
    vision_start_token_id=VISION_START,
    vision_end_token_id=VISION_END,
)
torch.manual_seed(0)
model = Qwen2VLForConditionalGeneration(config).eval()
grid = torch.tensor([[1, 4, 4], [1, 4, 4]])  # two images of 4x4 patches
tokens_per_image = int(grid[0].prod()) // 4  # spatial_merge_size ** 2
patch_dim = 3 * 2 * 4 * 4  # channels * temporal_patch_size * patch_size ** 2
rows = []
for _ in range(2):
    text = torch.randint(3, 96, (4,))
    image = torch.full((tokens_per_image,), IMAGE_TOKEN)
    rows.append(
        torch.cat(
            [text[:1], torch.tensor([VISION_START]), image, torch.tensor([VISION_END]), text[1:]]
        )
    )
input_ids = torch.stack(rows)
pixel_values = torch.randn(int(grid.prod(-1).sum()), patch_dim)
generate = dict(
    attention_mask=torch.ones_like(input_ids),
    pixel_values=pixel_values,
    image_grid_thw=grid,
    max_new_tokens=4,
    min_new_tokens=4,
    do_sample=False,
)
# The whole model: the image prefill (decoder_model) exports with observer-ci's grid
# patches (its vision code sizes tensors from the values of image_grid_thw: specialised to
# the one row of these images, the image count dynamic), the decode steps as they are.
with torch.no_grad(), observer_ci.observe(model, name="qwen2_vl_image_text", store_n_calls=4):
    model.generate(input_ids, **generate)
# The language model it calls, fed inputs_embeds and the 3-D positions computed in torch:
# one graph for the prefill and the decode steps (the way out for images of several
# resolutions in one call, which the grid patches do not cover).
language_model = model.model.language_model
with torch.no_grad(), observer_ci.observe(language_model, name="qwen2_vl_language_model"):
    model.generate(input_ids, **generate)
