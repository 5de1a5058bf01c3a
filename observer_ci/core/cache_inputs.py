"""Is this a cache input? One definition for every side (call families, dim names).

A model input holds a cache (the past keys and values, a recurrent state) when its name, or
the flattened leaf name the exporter gives its tensors (``past_key_values_key_cache_0``),
carries one of :data:`CACHE_INPUT_MARKERS`. ``cache_position`` is a token index, not a cache.

A media input (:data:`MEDIA_INPUT_MARKERS`: an image, its grid or mask, audio features) is
what a vision-language prefill takes and its decode steps never pass: the model branches
on its absence (``if pixel_values is not None``), so an empty tensor never stands in for it.
"""

from __future__ import annotations

CACHE_INPUT_MARKERS = ("past_key", "past_value", "cache")
NOT_CACHE_INPUTS = frozenset({"cache_position"})
MEDIA_INPUT_MARKERS = ("pixel", "image", "video", "audio", "input_features")


def is_cache_input(name: str) -> bool:
    """True for ``past_key_values``, ``past_key_value``, ``cache_params``, their leaves
    (``past_key_values_value_cache_3``, ``past_key_0``), not for ``cache_position``."""
    return name not in NOT_CACHE_INPUTS and any(m in name for m in CACHE_INPUT_MARKERS)


def is_media_input(name: str) -> bool:
    """True for ``pixel_values``, ``pixel_attention_mask``, ``image_grid_thw``, ..."""
    return any(m in name for m in MEDIA_INPUT_MARKERS)
