"""Mixture-of-experts models export with ``batched_mm`` experts, for the export only.

transformers 5.x runs the experts of MoE models (Qwen3-MoE, Mixtral, OLMoE, ...) with
``grouped_mm`` by default: ``torch._grouped_mm`` has no ONNX translation in torch.onnx.
``batched_mm`` computes the same products with ``bmm``, which exports. While exporting,
every transformers model inside the observed one that uses ``grouped_mm`` is switched to
``batched_mm``; afterwards each gets back exactly the implementation it had, so the
observed calls and the torch reference keep the user's setting. A note says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

GROUPED = "grouped_mm"
EXPORTABLE = "batched_mm"


def _moe_models(model: Any) -> list[Any]:
    """The transformers models inside ``model`` (itself included) using ``grouped_mm``."""
    modules = model.modules() if hasattr(model, "modules") else [model]
    return [
        m
        for m in modules
        if hasattr(m, "set_experts_implementation")
        and getattr(getattr(m, "config", None), "_experts_implementation", None) == GROUPED
    ]


@contextlib.contextmanager
def exportable_experts(model: Any) -> Iterator[list[str]]:
    """Switches ``grouped_mm`` experts to ``batched_mm`` inside the block; yields the notes
    to record (none when nothing was switched)."""
    models = _moe_models(model)
    if not models:
        yield []
        return
    configs = [m.config for m in models]
    previous = [c._experts_implementation_internal for c in configs]
    try:
        for m in models:
            m.set_experts_implementation(EXPORTABLE)
    except Exception as e:  # the export then fails on grouped_mm, with its cause
        _restore(configs, previous)
        yield [f"mixture-of-experts: could not switch the experts to {EXPORTABLE}: {e}"]
        return
    note = (
        f"mixture-of-experts: exported with `{EXPORTABLE}` experts (transformers' default "
        f"`{GROUPED}` has no ONNX translation); the model keeps `{GROUPED}` outside the "
        "export, and its calls were compared with the graph"
    )
    try:
        yield [note]
    finally:
        _restore(configs, previous)


def _restore(configs: list[Any], previous: list[Any]) -> None:
    for config, value in zip(configs, previous):
        config._experts_implementation_internal = value
