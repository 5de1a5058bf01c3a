"""The floating dtype a model computes in, when it is not float32 (float16, bfloat16)."""

from __future__ import annotations

from typing import Any

import torch

from observer_ci.observing.observer import InputObserver

_LOW = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


def low_precision_dtype(model: Any, observer: InputObserver) -> str | None:
    """``"bfloat16"`` / ``"float16"`` when the model's floating parameters or the observed
    floating inputs use it (the lowest precision wins), else None."""
    dtypes: set[torch.dtype] = set()
    if isinstance(model, torch.nn.Module):
        dtypes |= {p.dtype for p in model.parameters() if p.is_floating_point()}
    for obs in observer.observations:
        for value in obs.named.values():
            leaves = torch.utils._pytree.tree_leaves(value)
            dtypes |= {t.dtype for t in leaves if isinstance(t, torch.Tensor)}
    for dtype in (torch.bfloat16, torch.float16):
        if dtype in dtypes:
            return _LOW[dtype]
    return None
