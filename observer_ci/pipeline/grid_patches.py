"""Export patches for vision towers sized by the values of an image grid (Qwen2-VL's
``image_grid_thw``), applied only while observer-ci exports (see
:mod:`observer_ci.pipeline.export_patches`, which lists them).

The vision tower reads each image's ``(t, h, w)`` row with ``.tolist()`` to build its
rotary positions and ``cu_seqlens`` (the image boundaries), splits its attention by image
with ``torch.split(..., lengths.tolist())`` and the merged features by image. torch.export
records shapes, not values. The grid is specialised to the export sample's *pattern*: its
one row when every image has the same resolution (the number of images then stays
dynamic: the pattern repeats), all its rows otherwise (that grid only). The same results
then come from the token index:

- rotary positions: the pattern's positions (computed by transformers' own function,
  before the export) indexed by ``token % pattern tokens``; ``cu_seqlens`` likewise;
- attention by frame (each frame of ``h * w`` tokens attends to itself): one attention over
  all tokens with a block-diagonal additive mask (masked weights are exactly 0);
- features by image, concatenated right after: one piece (the same tensor).

The M-RoPE offsets (``rope_deltas``) are state: generate() computes them before the
first step and sets them on the model, whose forward returns them as they are (a constant
of the sample in a graph). Where generate() passed the positions (``position_ids`` of 4
rows: text, then temporal, height, width) and a 2-D ``attention_mask``, the returned
offsets are recomputed from them, prefill and decode alike: ``max(3-D positions) + 1 -
tokens attended`` (transformers' own formula; 0 for text-only positions).

Each patch is found by the code it replaces, not by a model name. A tower with window
attention (Qwen2.5-VL's ``get_vision_window_index``) is left as is.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch

GRID_CALLS = ("get_vision_position_ids(grid_thw", "get_vision_cu_seqlens(grid_thw")
SPLIT_BY_LENGTHS = "lengths.tolist()"
FEATURES_SPLIT_BY_GRID = "torch.split(vision_outputs.pooler_output, split_sizes)"
GRID_INPUT = "image_grid_thw"
# window attention (Qwen2.5-VL): some layers attend within windows, not frames: no patch,
# the export fails with the cause naming image_grid_thw (never a silently other graph)
WINDOWED = "get_vision_window_index("
STATE_DELTAS = "rope_deltas=self.rope_deltas"
PRECOMPUTED = ("image_", "video_")  # transformers' precomputed kwargs: left to the original


def code_of(function: Callable) -> str:
    """The source of ``function`` (its undecorated code), or "" where there is none."""
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def sample_grid_rows(inputs: Any) -> list[tuple[int, int, int]] | None:
    """The pattern of the export sample's ``image_grid_thw``: its one ``(t, h, w)`` row
    when all rows are equal (one resolution), else every row; None without a grid."""
    if not isinstance(inputs, tuple) or len(inputs) != 2:
        return None
    grid = (inputs[1] or {}).get(GRID_INPUT)
    if not isinstance(grid, torch.Tensor) or grid.ndim != 2 or grid.shape[-1] != 3:
        return None
    if grid.is_floating_point() or grid.shape[0] == 0:
        return None
    rows = [(int(t), int(h), int(w)) for t, h, w in grid.tolist()]
    return rows[:1] if len(set(rows)) == 1 else rows


def _frames(rows: list[tuple[int, int, int]]) -> torch.Tensor:
    """The frame of each token of the pattern (an image has ``t`` frames of ``h * w``)."""
    sizes = [h * w for t, h, w in rows for _ in range(t)]
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))


def _namespace(cls: type) -> dict[str, Any]:
    return vars(sys.modules[cls.__module__])


def _pattern_positions(model: torch.nn.Module, towers: list[type], rows: list) -> dict:
    """``{spatial_merge_size: positions of the pattern}`` by transformers' own function, on
    real tensors before the export (in the trace the grid's values would be symbols)."""
    positions: dict[int, torch.Tensor] = {}
    for module in model.modules():
        merge = getattr(module, "spatial_merge_size", None)
        if type(module) in towers and isinstance(merge, int) and merge not in positions:
            compute = _namespace(type(module)).get("get_vision_position_ids")
            if callable(compute):
                positions[merge] = compute(torch.tensor(rows), merge)
    return positions


def _in_pattern(tokens: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """Each token's entry of the pattern, the pattern repeating (one per image)."""
    return pattern.to(tokens.device)[tokens % pattern.shape[0]]


def _positions_from_token_index(
    original: Callable, rows: list, by_merge: dict[int, torch.Tensor]
) -> Callable:
    frames = _frames(rows)
    bounds = torch.nn.functional.pad(torch.bincount(frames).cumsum(0), (1, 0)).to(torch.int32)
    total = int(bounds[-1])  # tokens in one pattern: a Python int, read before the trace

    @functools.wraps(original)
    def forward(self: Any, hidden_states: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any):
        positions = by_merge.get(getattr(self, "spatial_merge_size", None))  # type: ignore[arg-type]
        if positions is None or "position_ids" in kwargs or "cu_seqlens" in kwargs:
            return original(self, hidden_states, grid_thw, **kwargs)
        device = hidden_states.device
        tokens = torch.arange(hidden_states.shape[0], device=device)
        kwargs["position_ids"] = _in_pattern(tokens, positions)
        repeats = hidden_states.shape[0] // frames.shape[0]  # the pattern's repeats (images)
        steps = torch.arange(repeats + 1, device=device, dtype=torch.int32) * total
        starts = (steps[:-1, None] + bounds[:-1].to(device)[None, :]).flatten()
        kwargs["cu_seqlens"] = torch.cat([starts, steps[-1:]])
        return original(self, hidden_states, grid_thw, **kwargs)

    return forward


def _attention_by_frame_as_one(original: Callable, frames: torch.Tensor) -> Callable:
    count = int(frames.max()) + 1  # frames in one pattern

    @functools.wraps(original)
    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        cu_seqlens: torch.Tensor,
        position_embeddings: Any = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        names = _namespace(type(self))
        flash = names.get("is_flash_attention_requested")
        if position_embeddings is None or flash is None or flash(self.config):
            return original(self, hidden_states, cu_seqlens, position_embeddings, **kwargs)
        length = hidden_states.shape[0]
        qkv = self.qkv(hidden_states).reshape(length, 3, self.num_heads, -1)
        query, key, value = qkv.permute(1, 0, 2, 3).unbind(0)
        query, key = names["apply_rotary_pos_emb_vision"](query, key, *position_embeddings)
        query, key, value = (x.transpose(0, 1).unsqueeze(0) for x in (query, key, value))
        tokens = torch.arange(length, device=hidden_states.device)
        frame = (tokens // frames.shape[0]) * count + _in_pattern(tokens, frames)
        same = frame[:, None] == frame[None, :]
        lowest = torch.finfo(query.dtype).min
        mask = torch.zeros(same.shape, dtype=query.dtype, device=query.device)
        mask = mask.masked_fill(~same, lowest)[None, None]
        attention = names["ALL_ATTENTION_FUNCTIONS"].get_interface(
            self.config._attn_implementation, names["eager_attention_forward"]
        )
        output, _ = attention(
            self, query, key, value, attention_mask=mask, scaling=self.scaling, dropout=0.0,
            is_causal=False, **kwargs,
        )  # fmt: skip
        return self.proj(output.reshape(length, -1).contiguous())

    return forward


def _features_in_one_piece(original: Callable) -> Callable:
    @functools.wraps(original)
    def get_image_features(
        self: Any, pixel_values: torch.Tensor, image_grid_thw: Any = None, **kwargs: Any
    ) -> Any:
        visual = getattr(self, "visual", None)
        precomputed = any(k.startswith(PRECOMPUTED) for k in kwargs)
        if not isinstance(visual, torch.nn.Module) or precomputed:
            return original(self, pixel_values, image_grid_thw, **kwargs)
        outputs = visual(pixel_values.type(visual.dtype), grid_thw=image_grid_thw, **kwargs)
        outputs.pooler_output = (outputs.pooler_output,)  # torch.cat of it: the same tensor
        return outputs

    return get_image_features


def _deltas_from_positions(original: Callable) -> Callable:
    @functools.wraps(original)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        outputs = original(self, *args, **kwargs)
        positions, mask = kwargs.get("position_ids"), kwargs.get("attention_mask")
        given = getattr(outputs, "rope_deltas", None)
        if not all(isinstance(t, torch.Tensor) for t in (positions, mask, given)):
            return outputs
        if positions.ndim != 3 or positions.shape[0] != 4 or mask.ndim != 2:
            return outputs
        attended = mask.to(torch.int64).sum(-1)
        deltas = positions[1:].amax(dim=(0, 2)).to(torch.int64) + 1 - attended
        outputs.rope_deltas = deltas.unsqueeze(1).to(given.dtype)
        return outputs

    return forward


def rope_deltas_patches(model: torch.nn.Module) -> list[tuple[Any, str, Callable]]:
    """The forward returning the ``rope_deltas`` state, recomputed from the positions."""
    return [
        (cls, "forward", _deltas_from_positions(cls.forward))
        for cls in _classes(model, "forward", STATE_DELTAS)
    ]


def _classes(model: torch.nn.Module, method: str, *texts: str) -> list[type]:
    found: list[type] = []
    for module in model.modules():
        cls = type(module)
        code = code_of(getattr(cls, method, None))  # type: ignore[arg-type]
        if cls not in found and code and all(t in code for t in texts):
            found.append(cls)
    return found


def grid_patches(model: torch.nn.Module, inputs: Any) -> list[tuple[Any, str, Callable]]:
    """``(class, attribute, replacement)`` for a vision tower sized by the values of the
    export sample's image grid, specialised to its pattern (see the module docstring)."""
    rows = sample_grid_rows(inputs)
    if rows is None:
        return []
    towers = [
        c for c in _classes(model, "forward", *GRID_CALLS) if WINDOWED not in code_of(c.forward)
    ]
    by_merge = _pattern_positions(model, towers, rows) if towers else {}
    if not by_merge:
        return []
    frames = _frames(rows)
    patches: list[tuple[Any, str, Callable]] = [
        (cls, "forward", _positions_from_token_index(cls.forward, rows, by_merge)) for cls in towers
    ]
    for cls in _classes(model, "forward", SPLIT_BY_LENGTHS, "torch.split("):
        patches.append((cls, "forward", _attention_by_frame_as_one(cls.forward, frames)))
    for cls in _classes(model, "get_image_features", FEATURES_SPLIT_BY_GRID):
        patches.append((cls, "get_image_features", _features_in_one_piece(cls.get_image_features)))
    return patches
