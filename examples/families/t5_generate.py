"""Observation script: ``generate()`` of a tiny random T5 (text encoder-decoder).

Like Whisper: the encoder runs once per ``generate``; the decoder's first step has no
``EncoderDecoderCache`` content yet and gets its own graph (``decoder_model``), later
steps share ``decoder_with_past_model``. (The Whisper example also observes its encoder.)
"""

import torch
from transformers import T5Config, T5ForConditionalGeneration

import observer_ci

config = T5Config(
    vocab_size=128,
    d_model=32,
    d_kv=8,
    d_ff=64,
    num_layers=1,
    num_decoder_layers=1,
    num_heads=4,
    relative_attention_num_buckets=8,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
)
torch.manual_seed(0)
model = T5ForConditionalGeneration(config).eval()
with (
    torch.no_grad(),
    observer_ci.observe(model, name="t5_decoder", store_n_calls=8),
):
    for batch, length in ((2, 6), (3, 9)):
        input_ids = torch.randint(2, 128, (batch, length))
        model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
        )
