"""Is this a cache input? One definition for every side (call families, dim names).

A model input holds a cache (the past keys and values, a recurrent state) when its name, or
the flattened leaf name the exporter gives its tensors (``past_key_values_key_cache_0``),
carries one of :data:`CACHE_INPUT_MARKERS`. ``cache_position`` is a token index, not a cache.
"""

from __future__ import annotations

CACHE_INPUT_MARKERS = ("past_key", "past_value", "cache")
NOT_CACHE_INPUTS = frozenset({"cache_position"})


def is_cache_input(name: str) -> bool:
    """True for ``past_key_values``, ``past_key_value``, ``cache_params``, their leaves
    (``past_key_values_value_cache_3``, ``past_key_0``), not for ``cache_position``."""
    return name not in NOT_CACHE_INPUTS and any(m in name for m in CACHE_INPUT_MARKERS)
