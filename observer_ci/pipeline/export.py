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

from observer_ci.core.constants import DEFAULT_OPSET
from observer_ci.core.dim_names import name_dims, name_onnx_axes
from observer_ci.core.errors import error_headline, error_tail
from observer_ci.core.results import ExportResult
from observer_ci.observing.observer import InputObserver
from observer_ci.pipeline.causes import SAMPLE_INDEPENDENT, explain_exception
from observer_ci.pipeline.experts import exportable_experts
from observer_ci.pipeline.export_patches import export_patches
from observer_ci.pipeline.onnx_exporter import onnx_export
from observer_ci.pipeline.torch_fixes import keyword_arguments_kept_bound


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
    named_dims: bool = False,
    call_numbers: list[int] | None = None,
) -> ExportResult:
    """Exports from the observer's inferred arguments and dynamic shapes; never raises.

    Candidate samples are the observed calls ordered by
    :meth:`InputObserver.candidate_indices` (the likeliest to trace first). Model code
    sometimes branches on a size (``seq > 1``) and fails to trace on one sample: the next
    ones are tried, every observed call if needed (``max_samples`` caps it), until a failure
    that does not depend on the sample or two samples fail with the same error.
    ``named_dims`` names the dynamic axes of the file (``batch_size``, ...: ``dim_names``).
    ``call_numbers`` maps the observer's calls to the numbers shown (a family's observer
    holds a subset of the calls).
    """
    onnx_path = Path(onnx_path)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    begin = time.perf_counter()
    failures: list[str] = []
    first_error: BaseException | None = None

    def number(index: int) -> int:
        return call_numbers[index] if call_numbers else index

    try:
        dynamic_shapes = observer.infer_dynamic_shapes(set_batch_dimension_for, named=named_dims)
        candidates = observer.export_candidates()
        if max_samples is not None:
            candidates = candidates[: max(1, max_samples)]
        module = as_module(model, method_name)
    except Exception as e:
        return ExportResult(
            ok=False,
            error=error_tail(e),
            seconds=time.perf_counter() - begin,
            cause=explain_exception(e, observer=observer),
        )
    seen_errors: set[str] = set()
    patched: list[str] = []  # export_patches applied
    for index in candidates:
        try:
            export_notes = _export_sample(
                model, module, observer, index, dynamic_shapes, opset, patched, onnx_path
            )
        except Exception as e:
            failures.append(f"call {number(index)}: {error_tail(e)}")
            first_error = first_error or e
            if _others_fail_alike(e, observer, seen_errors):
                break
            continue
        result = _described(
            onnx_path, observer, set_batch_dimension_for, named_dims, patched, export_notes
        )
        result.seconds = time.perf_counter() - begin
        result.sample_index = number(index)
        result.failed_samples = failures
        return result
    return ExportResult(
        ok=False,
        error=failures[0].split(": ", 1)[1],  # the best sample's error; others in failed_samples
        seconds=time.perf_counter() - begin,
        failed_samples=failures,
        cause=explain_exception(first_error, observer=observer) if first_error else None,
    )


def _export_sample(
    model: Any,
    module: Any,
    observer: InputObserver,
    index: int,
    dynamic_shapes: Any,
    opset: int,
    patched: list[str],
    onnx_path: Path,
) -> list[str]:
    """Exports and saves the graph traced on observed call ``index``; the export's notes."""
    inputs = observer.infer_arguments(index, as_args_kwargs=True)
    with exportable_experts(model) as export_notes:
        program = _export_one(module, inputs, dynamic_shapes, opset, patched)
    program.save(str(onnx_path), external_data=_needs_external_data(program))
    return export_notes


def _others_fail_alike(error: BaseException, observer: InputObserver, seen: set[str]) -> bool:
    """True when another sample would fail the same way: a failure that does not depend on
    the sample, or the same error twice."""
    if explain_exception(error, observer=observer).kind in SAMPLE_INDEPENDENT:
        return True
    key = _error_key(error_tail(error))
    if key in seen:
        return True
    seen.add(key)
    return False


def _described(
    onnx_path: Path,
    observer: InputObserver,
    set_batch_dimension_for: Any,
    named_dims: bool,
    patched: list[str],
    export_notes: list[str],
) -> ExportResult:
    """The saved graph's facts, its axes named first when asked, with the export's notes."""
    notes = _name_axes(onnx_path, observer, set_batch_dimension_for) if named_dims else []
    result = describe_onnx(onnx_path)
    if patched:
        notes.append(
            f"exported with observer-ci's export patches {sorted(set(patched))} "
            "(see the README); every call is checked against the unpatched model"
        )
    result.notes = export_notes + notes
    return result


def _name_axes(onnx_path: Path, observer: InputObserver, set_batch_dimension_for: Any) -> list[str]:
    """Gives torch's anonymous axes (``s23``) the observed dims' names, in the file."""
    try:
        proto = onnx.load(str(onnx_path), load_external_data=False)
        per_leaf = name_dims(observer, set_batch_dimension_for)
        mapping, notes = name_onnx_axes(proto, observer.leaf_names(), per_leaf)
        if mapping:
            onnx.save(proto, str(onnx_path))
        return notes
    except Exception as e:  # the anonymous file stays usable
        return [f"dims left anonymous: naming them failed ({error_tail(e, 200)})"]


def _error_key(error: str) -> str:
    """The error's headline without numbers (sizes, node ids): failures alike compare equal."""
    return re.sub(r"\d+", "#", error_headline(error))


def _export_one(
    module: torch.nn.Module,
    inputs: Any,
    dynamic_shapes: Any,
    opset: int,
    patched: list[str] | None = None,
) -> Any:
    args, kwargs = inputs  # (args, kwargs): InputObserver.infer_arguments(as_args_kwargs=True)
    sink = io.StringIO()
    with (
        contextlib.redirect_stdout(sink),
        torch.no_grad(),
        keyword_arguments_kept_bound(),
        export_patches(module, inputs) as applied,
    ):
        if patched is not None:
            patched.extend(applied)
        return onnx_export(module, args, kwargs, dynamic_shapes, opset)


# Weights past this size are saved beside the graph (``<name>.onnx.data``): the graph file
# then stays small, so naming its axes and describing it never load the weights again, and
# saving never builds one proto holding them all (peak memory follows the weights).
EXTERNAL_DATA_MIN_BYTES = 64 << 20


def _needs_external_data(program: Any) -> bool:
    try:
        size = sum(
            int(v.const_value.nbytes)
            for v in program.model.graph.initializers.values()
            if v.const_value is not None
        )
    except Exception:
        return False
    return size > EXTERNAL_DATA_MIN_BYTES


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
    nodes = [*proto.graph.node, *(n for f in proto.functions for n in f.node)]
    node_count = len(nodes)
    op_counts: dict[str, int] = {}
    for node in nodes:
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        op_counts[op] = op_counts.get(op, 0) + 1
    initializer_bytes = sum(_stored_bytes(t) for t in proto.graph.initializer)
    dims = {i.name: _dims(i) for i in proto.graph.input}
    output_dims = {o.name: _dims(o) for o in proto.graph.output}
    return ExportResult(
        ok=True,
        opset=opset,
        node_count=node_count,
        file_size=size,
        onnx_path=str(onnx_path),
        input_names=[i.name for i in proto.graph.input],
        input_dims=dims,
        output_names=[o.name for o in proto.graph.output],
        output_dims=output_dims,
        op_counts=dict(sorted(op_counts.items())),
        initializer_bytes=initializer_bytes,
    )


def _stored_bytes(tensor: onnx.TensorProto) -> int:
    """A weight's bytes without reading external data (its recorded length) or copying."""
    for entry in tensor.external_data:
        if entry.key == "length":
            return int(entry.value)
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    return tensor.ByteSize()


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    shape = value_info.type.tensor_type.shape
    return [d.dim_param if d.dim_param else int(d.dim_value) for d in shape.dim]
