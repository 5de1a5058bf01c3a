"""Work-arounds for torch.export defects that observed signatures hit, applied only while
observer-ci exports.

torch 2.13's ``torch.export`` rebuilds the bound arguments for its range constraints by
putting every keyword argument at the top level, so a method with ``**kwargs`` fails with
"Must provide a tree_name when there might be a mismatch" whatever ``dynamic_shapes`` says
(torch.export wants the ``**kwargs`` shapes nested under the parameter's name, which the
observer gives). :func:`keyword_arguments_kept_bound` keeps ``**kwargs`` entries under
their parameter while an export runs (upstream fix: pytorch PR 174593).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch


def _var_keyword_name(mod: Any) -> str | None:
    target = mod.forward if isinstance(mod, torch.nn.Module) else mod
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    return next((p.name for p in params if p.kind == p.VAR_KEYWORD), None)


def _range_constraints(mod, export_artifact, args, kwargs, dynamic_shapes):
    from torch._export.non_strict_utils import make_constraints
    from torch.export.dynamic_shapes import _combine_args
    from torch.export.graph_signature import InputKind

    specs = export_artifact.aten.sig.input_specs
    num_lifted = next(
        (i for i, s in enumerate(specs) if s.kind == InputKind.USER_INPUT), len(specs)
    )
    kwargs = kwargs or {}
    bound = _combine_args(mod, args, kwargs)
    var_keyword = _var_keyword_name(mod)
    # the traced order: what was passed positionally, then keywords as passed, the
    # **kwargs entries staying together under their parameter's name
    ordered = {k: v for k, v in bound.items() if k not in kwargs and k != var_keyword}
    for key in kwargs:
        if key in bound and key != var_keyword:
            ordered[key] = bound[key]
        elif var_keyword in bound and var_keyword not in ordered:
            ordered[var_keyword] = bound[var_keyword]
    if var_keyword in bound and var_keyword not in ordered:
        ordered[var_keyword] = bound[var_keyword]
    return make_constraints(
        export_artifact.fake_mode, export_artifact.aten.gm, ordered, dynamic_shapes, num_lifted
    )


@contextlib.contextmanager
def keyword_arguments_kept_bound() -> Iterator[None]:
    """While the block runs, ``torch.export`` accepts methods with ``**kwargs``."""
    from torch.export import _trace

    original = getattr(_trace, "_get_range_constraints", None)
    if original is None:  # another torch: nothing to fix
        yield
        return
    _trace._get_range_constraints = _range_constraints
    try:
        yield
    finally:
        _trace._get_range_constraints = original
