"""Export an observed model with ``torch.onnx.export(dynamo=True)`` and describe the file."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import time
from pathlib import Path
from typing import Any

import onnx
import torch

from observer_ci.constants import DEFAULT_OPSET
from observer_ci.errors import error_headline, error_tail
from observer_ci.families import has_empty_form, with_call_batch
from observer_ci.observer import InputObserver
from observer_ci.results import ExportResult


def as_module(model: Any, method_name: str) -> torch.nn.Module:
    """A module whose ``forward`` is ``model.<method_name>`` with the same signature."""
    if method_name == "forward" and isinstance(model, torch.nn.Module):
        return model
    method = getattr(model, method_name)
    signature = inspect.signature(method)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.wrapped, method_name)(*args, **kwargs)

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    forward.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *signature.parameters.values()]
    )
    cls = type(f"{type(model).__name__}_{method_name}", (torch.nn.Module,), {"forward": forward})
    wrapper = cls()
    wrapper.wrapped = model
    wrapper.training = bool(getattr(model, "training", False))  # no recursion into the model
    return wrapper


def export_observed(
    model: Any,
    observer: InputObserver,
    onnx_path: str | Path,
    *,
    method_name: str = "forward",
    set_batch_dimension_for: Any = None,
    opset: int = DEFAULT_OPSET,
    max_samples: int | None = None,
    call_numbers: list[int] | None = None,
) -> ExportResult:
    """Exports from the observer's inferred arguments and dynamic shapes; never raises.

    Candidate samples are the observed calls ordered by :func:`rank_candidates` (the most
    likely to trace first). Model code sometimes branches on a size (``seq > 1``) and fails
    to trace on one sample: the next ones are tried, every observed call if needed
    (``max_samples`` caps it), until two samples fail with the same error. ``call_numbers``
    maps the observer's calls to the numbers shown (a family's observer holds a subset).
    """
    onnx_path = Path(onnx_path)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    begin = time.perf_counter()
    failures: list[str] = []

    def number(index: int) -> int:
        return call_numbers[index] if call_numbers else index

    try:
        dynamic_shapes = observer.infer_dynamic_shapes(set_batch_dimension_for)
        candidates = rank_candidates(observer, set_batch_dimension_for)
        if max_samples is not None:
            candidates = candidates[: max(1, max_samples)]
        module = as_module(model, method_name)
    except Exception as e:
        return ExportResult(ok=False, error=error_tail(e), seconds=time.perf_counter() - begin)
    seen_errors: set[str] = set()
    for index in candidates:
        try:
            program = _export_one(module, _sample(observer, index), dynamic_shapes, opset)
            program.save(str(onnx_path), external_data=_needs_external_data(program))
        except Exception as e:
            error = error_tail(e)
            failures.append(f"call {number(index)}: {error}")
            key = _error_key(error)
            if key in seen_errors:
                break  # the same failure twice: other samples would fail alike
            seen_errors.add(key)
            continue
        result = describe_onnx(onnx_path)
        result.seconds = time.perf_counter() - begin
        result.sample_index = number(index)
        result.failed_samples = failures
        return result
    return ExportResult(
        ok=False,
        error=failures[0].split(": ", 1)[1],  # the best sample's error; others in failed_samples
        seconds=time.perf_counter() - begin,
        failed_samples=failures,
    )


def _sample(observer: InputObserver, index: int) -> Any:
    """One call's export arguments, stand-ins of the call's own batch."""
    flat = observer.infer_arguments(index, flat=True)
    fixed = with_call_batch(observer, index, flat, observer.dynamic_dims())
    if all(a is b for a, b in zip(flat, fixed)):
        return observer.infer_arguments(index)
    args, kwargs = observer.call_arguments(fixed)
    return args if args else kwargs


def rank_candidates(observer: InputObserver, set_batch_dimension_for: Any = None) -> list[int]:
    """Observed calls ordered by how likely they are to trace as the export sample.

    First the calls whose absent inputs need no made-up values (an absent input with a
    dynamic non-batch dim is fed as a 0-length tensor, which means "nothing"; any other is a
    made-up stand-in, never a sample), then the fewest dynamic sizes 0 or 1
    (``torch.export`` specialises them; model code branches on ``seq > 1``), then the
    fewest absent inputs, then the largest dynamic sizes, then observation order. The
    prefill call of a ``generate()`` comes before its decode calls (sequence length 1).
    """
    dynamic = observer.dynamic_dims(set_batch_dimension_for)

    def score(i: int) -> tuple[int, int, int, int, int]:
        flat = observer.aligned_inputs(i)
        made_up = sum(t is None and not has_empty_form(d) for t, d in zip(flat, dynamic))
        small = sum(
            1 for t, dims in zip(flat, dynamic) if t is not None for d in dims if t.shape[d] < 2
        )
        absent = sum(t is None for t in flat)
        size = sum(t.shape[d] for t, dims in zip(flat, dynamic) if t is not None for d in dims)
        return (made_up, small, absent, -size, i)

    return sorted(range(observer.num_obs()), key=score)


def _error_key(error: str) -> str:
    """The error's headline without numbers (sizes, node ids): failures alike compare equal."""
    return re.sub(r"\d+", "#", error_headline(error))


def _export_one(module: torch.nn.Module, inputs: Any, dynamic_shapes: Any, opset: int) -> Any:
    args, kwargs = (inputs, None) if isinstance(inputs, tuple) else ((), inputs)
    if isinstance(inputs, tuple) and any(isinstance(a, dict) for a in inputs):
        args, kwargs, dynamic_shapes = _dicts_by_name(module, inputs, dynamic_shapes)
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), torch.no_grad():
        return torch.onnx.export(
            module,
            args,
            kwargs=kwargs,
            dynamic_shapes=dynamic_shapes,
            dynamo=True,
            opset_version=opset,
            external_data=False,
            verbose=False,
        )


def _dicts_by_name(
    module: torch.nn.Module, args: tuple[Any, ...], dynamic_shapes: Any
) -> tuple[tuple[Any, ...], dict[str, Any] | None, Any]:
    """Positional arguments as keyword arguments when one is a dict.

    ``torch.onnx.export`` reads a trailing dict in ``args`` as keyword arguments
    (``missing a required argument: 'batch'``); passing every argument by its parameter
    name keeps the dict the value of its parameter.
    """
    params = [
        p.name
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(args) > len(params) or any(
        p.kind == p.POSITIONAL_ONLY for p in inspect.signature(module.forward).parameters.values()
    ):
        return args, None, dynamic_shapes
    kwargs = dict(zip(params, args))
    if isinstance(dynamic_shapes, (tuple, list)):
        dynamic_shapes = dict(zip(params, dynamic_shapes))
    return (), kwargs, dynamic_shapes


def _needs_external_data(program: Any) -> bool:
    try:
        size = sum(
            int(v.const_value.nbytes)
            for v in program.model.graph.initializers.values()
            if v.const_value is not None
        )
    except Exception:
        return False
    return size > 1_800_000_000


def describe_onnx(onnx_path: str | Path) -> ExportResult:
    """Opset, node count, size and input names with their (symbolic) dims."""
    onnx_path = Path(onnx_path)
    proto = onnx.load(str(onnx_path), load_external_data=False)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    size = onnx_path.stat().st_size
    for data_file in {
        e.value
        for init in proto.graph.initializer
        for e in init.external_data
        if e.key == "location"
    }:
        extra = onnx_path.parent / data_file
        if extra.exists():
            size += extra.stat().st_size
    node_count = len(proto.graph.node) + sum(len(f.node) for f in proto.functions)
    dims = {i.name: _dims(i) for i in proto.graph.input}
    return ExportResult(
        ok=True,
        opset=opset,
        node_count=node_count,
        file_size=size,
        onnx_path=str(onnx_path),
        input_names=[i.name for i in proto.graph.input],
        input_dims=dims,
        output_names=[o.name for o in proto.graph.output],
    )


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    shape = value_info.type.tensor_type.shape
    return [d.dim_param if d.dim_param else int(d.dim_value) for d in shape.dim]
