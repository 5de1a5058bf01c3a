"""Observation script: ``generate()`` of a tiny random Whisper (encoder-decoder).

``generate`` runs the encoder once, then calls ``forward`` with ``encoder_outputs`` (a
``BaseModelOutput``) and an ``EncoderDecoderCache``. The first decoder step has no cache
yet (the cross-attention keys are computed from the encoder output); later steps reuse
it. One graph cannot serve both honestly, so observer-ci exports two, named like the
Hugging Face ONNX exports: ``decoder_model`` (first step) and ``decoder_with_past_model``.
The encoder is observed too and gets its own graph.
"""

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

import observer_ci

config = WhisperConfig(
    vocab_size=200,
    num_mel_bins=16,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    d_model=32,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_source_positions=30,
    max_target_positions=40,
    decoder_start_token_id=1,
    pad_token_id=0,
    eos_token_id=2,
    bos_token_id=1,
    suppress_tokens=None,
    begin_suppress_tokens=None,
)
torch.manual_seed(0)
model = WhisperForConditionalGeneration(config).eval()
with (
    torch.no_grad(),
    observer_ci.observe(model.get_encoder(), name="whisper_encoder", store_n_calls=2),
    observer_ci.observe(model, name="whisper_decoder", store_n_calls=8),
):
    for batch in (2, 3):
        features = torch.randn(batch, config.num_mel_bins, 2 * config.max_source_positions)
        model.generate(features, max_new_tokens=4, do_sample=False)
