"""Observation script: image-text ``generate()`` of a tiny random Gemma 3.

The prefill passes ``pixel_values`` (and ``token_type_ids`` marking the image tokens)
with an empty cache; the decode steps pass the cache and no image inputs. Each gets the
graph that serves it: ``decoder_model`` (image + prompt) and ``decoder_with_past_model``.
"""

import torch
from transformers import Gemma3Config, Gemma3ForConditionalGeneration

import observer_ci

IMAGE_TOKEN, TOKENS_PER_IMAGE, VOCAB = 99, 4, 100
config = Gemma3Config(
    text_config=dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=16,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    ),
    vision_config=dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    ),
    mm_tokens_per_image=TOKENS_PER_IMAGE,
    image_token_index=IMAGE_TOKEN,
    boi_token_index=97,
    eoi_token_index=98,
)
torch.manual_seed(0)
model = Gemma3ForConditionalGeneration(config).eval()
text = torch.randint(3, 96, (2, 5))
image = torch.full((2, TOKENS_PER_IMAGE), IMAGE_TOKEN)
input_ids = torch.cat([text[:, :1], image, text[:, 1:]], dim=1)
token_type_ids = (input_ids == IMAGE_TOKEN).long()
with torch.no_grad(), observer_ci.observe(model, name="gemma3_image_text", store_n_calls=4):
    model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        token_type_ids=token_type_ids,
        pixel_values=torch.randn(2, 3, 32, 32),
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=False,
    )

# The reference observer's way: missing= gives the image inputs a value for the decode
# steps (shapes only; the model never runs on them). Where one graph cannot serve those
# calls with it, they get their own graph, as above.
missing = dict(pixel_values=torch.zeros(2, 3, 32, 32), token_type_ids=token_type_ids)
with (
    torch.no_grad(),
    observer_ci.observe(model, name="gemma3_image_text_missing", store_n_calls=4, missing=missing),
):
    model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        token_type_ids=token_type_ids,
        pixel_values=torch.randn(2, 3, 32, 32),
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=False,
    )
