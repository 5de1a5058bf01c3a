"""Observation script: Qwen2-VL ``generate()`` as users vary it, in one observation: 1 and
2 images per prompt (one resolution), batch 1 and 2, prompt lengths, ``mm_token_type_ids``
given as the processor returns it (3-D M-RoPE positions, computed by generate()); then 2
images each with ``missing=``; then images of two resolutions in left-padded prompts.
"""

import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

import observer_ci

VOCAB, IMAGE_TOKEN, VISION_START, VISION_END, NEW_TOKENS = 100, 97, 98, 99, 3
PATCH, MERGE, TEMPORAL = 4, 2, 2
config = Qwen2VLConfig(
    text_config=dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=1,
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
        embed_dim=16,
        hidden_size=32,
        num_heads=2,
        mlp_ratio=2,
        patch_size=PATCH,
        spatial_merge_size=MERGE,
        temporal_patch_size=TEMPORAL,
        in_channels=3,
    ),
    image_token_id=IMAGE_TOKEN,
    vision_start_token_id=VISION_START,
    vision_end_token_id=VISION_END,
)
torch.manual_seed(0)
model = Qwen2VLForConditionalGeneration(config).eval()
GRID_ROW = (1, 4, 4)  # one resolution: 4 x 4 patches
TOKENS_PER_IMAGE = GRID_ROW[0] * GRID_ROW[1] * GRID_ROW[2] // MERGE**2
PATCH_DIM = 3 * TEMPORAL * PATCH**2


def prompts(grids: list[list[tuple[int, int, int]]], prompt: int) -> dict:
    """One prompt per entry of ``grids`` with one image per grid row, each between vision
    start and end tokens, left-padded to the longest prompt."""
    rows, types = [], []
    for images in grids:
        parts, kinds = [torch.randint(3, 96, (1,))], [torch.zeros(1)]
        for t, h, w in images:
            tokens = t * h * w // MERGE**2
            parts += [torch.tensor([VISION_START]), torch.full((tokens,), IMAGE_TOKEN)]
            parts.append(torch.tensor([VISION_END]))
            kinds += [torch.zeros(1), torch.ones(tokens), torch.zeros(1)]
        parts.append(torch.randint(3, 96, (prompt - 1,)))
        kinds.append(torch.zeros(prompt - 1))
        rows.append(torch.cat(parts))
        types.append(torch.cat(kinds).int())
    longest = max(len(r) for r in rows)
    pad = [longest - len(r) for r in rows]
    input_ids = torch.stack(
        [torch.cat([torch.zeros(n, dtype=torch.long), r]) for n, r in zip(pad, rows)]
    )
    mask = torch.stack([torch.arange(longest) >= n for n in pad]).long()
    token_types = torch.stack(
        [torch.cat([torch.zeros(n, dtype=torch.int), t]) for n, t in zip(pad, types)]
    )
    grid = torch.tensor([row for images in grids for row in images])
    return dict(
        input_ids=input_ids,
        attention_mask=mask,
        mm_token_type_ids=token_types,
        pixel_values=torch.randn(int(grid.prod(-1).sum()), PATCH_DIM),
        image_grid_thw=grid,
    )


def inputs(batch: int, images: int, prompt: int) -> dict:
    """``batch`` prompts of ``images`` images each, all of one resolution."""
    return prompts([[GRID_ROW] * images] * batch, prompt)


def generate(**kwargs) -> None:
    model.generate(**kwargs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)


varied = [inputs(1, 1, 3), inputs(1, 2, 5), inputs(2, 1, 4)]
with torch.no_grad(), observer_ci.observe(model, name="qwen2_vl_varied", store_n_calls=9):
    for kwargs in varied:
        generate(**kwargs)

two = inputs(2, 2, 4)
missing = dict(pixel_values=torch.zeros_like(two["pixel_values"]))
observed = observer_ci.observe(
    model, name="qwen2_vl_two_images_missing", missing=missing, store_n_calls=3
)
with torch.no_grad(), observed:
    generate(**two)

# images of two resolutions (4 x 4 and 4 x 8 patches), 2 and 1 per prompt, left-padded
mixed = prompts([[GRID_ROW, (1, 4, 8)], [(1, 4, 8)]], 3)
with torch.no_grad(), observer_ci.observe(model, name="qwen2_vl_two_resolutions", store_n_calls=3):
    generate(**mixed)
