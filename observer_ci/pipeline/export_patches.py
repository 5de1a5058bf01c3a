"""Patches that help ``torch.export`` through multimodal model code, applied only while
observer-ci exports (:func:`export_patches`), never while the model runs in torch.

The replay compares every observed call of the unpatched model with the graph exported
under the patches, so a patch that changed what the model computes would show up as a
discrepancy. Each patch is found by what it fixes, not by a model name:

- ``list(image_features)`` over the images of a batch (LLaVA's ``get_image_features``):
  iterating a tensor specialises its first dim, so ``pixel_values`` dim 0 (the number of
  images) was baked into the graph. While exporting, the projector's output is seen as one
  image of all the patches (``(1, images * patches, hidden)``): ``torch.cat`` of that
  one-element list is the same tensor as ``torch.cat`` of one element per image.
- ``torch.all(attention_mask == 1)`` in ``_update_mamba_mask`` (Jamba, Bamba, Falcon-H1,
  Granite-MoE-hybrid, Nemotron-H, Qwen3-Next, ...: hybrid attention + state-space models):
  a Python branch on the mask's values, dropping a mask of ones. While exporting the mask
  is kept whenever the cache has no previous state: the state-space layers multiply their
  inputs by it, and multiplying by ones is exact, so both branches give the same numbers.
- The values of ``image_grid_thw`` (Qwen2-VL: one ``(t, h, w)`` row per image) size the
  vision tower's tensors (``.tolist()`` in ``get_vision_position_ids``, ``cu_seqlens``,
  the split of the attention by image and of the features by image). While exporting
  (:mod:`observer_ci.pipeline.grid_patches`) the grid is specialised to the sample's: its
  one row when every image has one resolution (the number of images stays dynamic), its
  rows otherwise; positions and image boundaries come from the token index, the attention
  by image is one attention with a block-diagonal mask, the features stay in one piece.
  Calls with another grid fail their replay (said so), never silently. The
  ``rope_deltas`` the forward returns (state set by generate()) are recomputed from the
  positions generate() passes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from observer_ci.pipeline.grid_patches import code_of, grid_patches, rope_deltas_patches

LIST_OF_IMAGES = "image_features = list(image_features)"
MASK_OF_ONES_DROPPED = "torch.all(attention_mask == 1)"


def _one_image_of_all_patches(module: Any, _inputs: Any, output: torch.Tensor) -> torch.Tensor:
    return output.reshape(1, -1, output.shape[-1])


def _get_image_features_as_one_list(original: Callable) -> Callable:
    @functools.wraps(original)
    def get_image_features(self: Any, *args: Any, **kwargs: Any) -> Any:
        projector = getattr(self, "multi_modal_projector", None)
        if kwargs.get("image_sizes") is not None or not isinstance(projector, torch.nn.Module):
            return original(self, *args, **kwargs)  # split by image sizes: left as is
        handle = projector.register_forward_hook(_one_image_of_all_patches)
        try:
            return original(self, *args, **kwargs)
        finally:
            handle.remove()

    return get_image_features


def _list_of_images_classes(model: torch.nn.Module) -> list[type]:
    classes = []
    for module in model.modules():
        cls = type(module)
        method = getattr(cls, "get_image_features", None)
        if method is None or cls in classes or not hasattr(module, "multi_modal_projector"):
            continue
        if LIST_OF_IMAGES in code_of(method):
            classes.append(cls)
    return classes


def _mamba_mask_kept(original: Callable) -> Callable:
    @functools.wraps(original)
    def _update_mamba_mask(self: Any, attention_mask: Any, past_key_values: Any) -> Any:
        has_previous_state = getattr(past_key_values, "has_previous_state", None)
        if attention_mask is None or not callable(has_previous_state):
            return original(self, attention_mask, past_key_values)
        return None if has_previous_state() else attention_mask

    return _update_mamba_mask


def _mamba_mask_classes(model: torch.nn.Module) -> list[type]:
    classes = []
    for module in model.modules():
        cls = type(module)
        method = getattr(cls, "_update_mamba_mask", None)
        if method is not None and cls not in classes and MASK_OF_ONES_DROPPED in code_of(method):
            classes.append(cls)
    return classes


def applicable_patches(model: Any, inputs: Any = None) -> list[tuple[Any, str, Callable]]:
    """``(owner, attribute, replacement)`` for every patch the model's code needs; the owner
    is a class or a module. ``inputs`` (``(args, kwargs)``) is the export sample."""
    if not isinstance(model, torch.nn.Module):
        return []
    patches: list[tuple[Any, str, Callable]] = [
        (cls, "get_image_features", _get_image_features_as_one_list(cls.get_image_features))
        for cls in _list_of_images_classes(model)
    ]
    patches += [
        (cls, "_update_mamba_mask", _mamba_mask_kept(cls._update_mamba_mask))
        for cls in _mamba_mask_classes(model)
    ]
    return patches + grid_patches(model, inputs) + rope_deltas_patches(model)


@contextlib.contextmanager
def _patched(patches: list[tuple[Any, str, Callable]]) -> Iterator[list[str]]:
    """Sets every ``(owner, attribute, replacement)``; yields their names
    (``LlavaModel.get_image_features``) and restores every attribute on exit."""
    saved = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in patches]
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        yield [f"{owner.__name__.rsplit('.', 1)[-1]}.{name}" for owner, name, _ in patches]
    finally:
        for owner, name, original in reversed(saved):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


@contextlib.contextmanager
def export_patches(model: Any, inputs: Any = None) -> Iterator[list[str]]:
    """While the block runs, the patches ``model`` needs are in place (``inputs``: the
    export sample); yields their names and restores every attribute on exit."""
    with _patched(applicable_patches(model, inputs)) as names:
        yield names


@contextlib.contextmanager
def state_outputs_recomputed(model: Any) -> Iterator[list[str]]:
    """While the block runs, outputs that echo model state (``rope_deltas``) are computed
    from the inputs as in the exported graph. The unseen-shape probe runs torch so: its
    made-up positions have no state generate() set; every other output is torch's own, and
    the replay of each observed call checks these outputs against the unpatched model."""
    patches = rope_deltas_patches(model) if isinstance(model, torch.nn.Module) else []
    with _patched(patches) as names:
        yield names
