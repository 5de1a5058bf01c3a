"""One decoder file for both call families: ``decoder_model_merged.onnx``.

The Hugging Face ONNX exports store a decoder's weights once: ``decoder_model`` (first
step, no cache) and ``decoder_with_past_model`` become the two branches of an ``If`` on a
``use_cache_branch`` input. This module builds that file from the two graphs observer-ci
exported, sharing every initializer whose contents are equal (the exporter's constant
folding names the same weight differently in each graph), and checks it on the observed
calls. Inputs the branch without cache does not read are still inputs of the merged file:
feed them anything of the right type and rank (0-length where a dim is symbolic).
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from observer_ci.core.exceptions import MergeError

MERGED_NAME = "decoder_model_merged"
USE_CACHE_BRANCH = "use_cache_branch"


@dataclass
class MergeFacts:
    """What the merge saved."""

    path: str
    shared_initializers: int  # initializers stored once for both branches
    bytes_saved: int  # initializer bytes not stored twice
    file_size: int


def merge_decoders(with_past: str | Path, without_past: str | Path, out: str | Path) -> MergeFacts:
    """Writes ``out``: ``If(use_cache_branch, with_past, without_past)`` with one copy of
    each distinct initializer. Raises :class:`MergeError` when the graphs disagree on their
    outputs (count, element types), opsets or functions.

    Memory follows one tensor, not the models: the graphs are read without their external
    data, tensors are compared by a digest of their raw bytes read one at a time, and the
    distinct external tensors are streamed into ``<out>.data`` (inline ones stay inline)."""
    past = onnx.load(str(with_past), load_external_data=False)
    first = onnx.load(str(without_past), load_external_data=False)
    _check_compatible(past, first)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = _DataFile(out.parent / f"{out.name}.data")
    outer: dict[str, TensorProto] = {}  # merged name -> tensor
    by_content: dict[str, str] = {}  # content digest -> merged name
    saved = 0
    shared = 0
    renames: list[dict[str, str]] = []
    try:
        for prefix, model, source in (("past", past, with_past), ("first", first, without_past)):
            rename: dict[str, str] = {}
            for tensor in model.graph.initializer:
                raw = _raw_bytes(tensor, Path(source).parent)
                digest = _digest(tensor, raw)
                if digest in by_content:
                    rename[tensor.name] = by_content[digest]
                    saved += len(raw)
                    shared += 1
                    continue
                name = tensor.name if tensor.name not in outer else f"{prefix}/{tensor.name}"
                copy = TensorProto()
                copy.CopyFrom(tensor)  # an external tensor's proto holds no data: small
                copy.name = name
                if tensor.data_location == TensorProto.EXTERNAL:
                    data.append(copy, raw)
                outer[name] = copy
                by_content[digest] = name
                rename[tensor.name] = name
            renames.append(rename)
    finally:
        data.close()
    model = _merged_model(past, first, renames, outer)
    onnx.save(model, str(out))
    onnx.checker.check_model(str(out))  # by path: external data and large files checked too
    size = out.stat().st_size + data.size
    return MergeFacts(str(out), shared, saved, size)


def _merged_model(
    past: onnx.ModelProto,
    first: onnx.ModelProto,
    renames: list[dict[str, str]],
    outer: dict[str, TensorProto],
) -> onnx.ModelProto:
    """The ``If`` model over the two graphs, the initializers given (already renamed)."""
    inputs = list(past.graph.input)
    names = {i.name for i in inputs}
    position = {i.name: k for k, i in enumerate(inputs)}
    for value in first.graph.input:
        if value.name in names:
            inputs[position[value.name]] = _widened(inputs[position[value.name]], value)
        else:
            inputs.append(value)
            names.add(value.name)
    outer_names = names | set(outer) | {USE_CACHE_BRANCH}
    then_branch = _branch(past.graph, "past", renames[0], names, outer_names)
    else_branch = _branch(first.graph, "first", renames[1], names, outer_names)
    outputs = [  # ranks kept, sizes left open (the branches differ in them)
        helper.make_tensor_value_info(
            o.name, o.type.tensor_type.elem_type, [None] * len(o.type.tensor_type.shape.dim)
        )
        for o in past.graph.output
    ]
    node = helper.make_node(
        "If",
        [USE_CACHE_BRANCH],
        [o.name for o in outputs],
        then_branch=then_branch,
        else_branch=else_branch,
        name="use_cache_branch_if",
    )
    flag = helper.make_tensor_value_info(USE_CACHE_BRANCH, TensorProto.BOOL, [1])
    graph = helper.make_graph(
        [node], MERGED_NAME, [*inputs, flag], outputs, initializer=list(outer.values())
    )
    model = helper.make_model(graph, opset_imports=list(past.opset_import))
    model.ir_version = past.ir_version
    model.functions.extend(past.functions)
    return model


class _DataFile:
    """``<merged>.data``, opened on the first external tensor: tensors appended one by one,
    each proto pointed at its bytes (location, offset, length)."""

    def __init__(self, path: Path):
        self.path, self.size, self._handle = path, 0, None
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # an earlier run's file (possibly linked from the export cache)

    def append(self, tensor: TensorProto, raw: bytes) -> None:
        if self._handle is None:
            self._handle = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        offset = self.size
        self._handle.write(raw)
        self.size += len(raw)
        del tensor.external_data[:]
        for key, value in (("location", self.path.name), ("offset", offset), ("length", len(raw))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        tensor.data_location = TensorProto.EXTERNAL

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


def _raw_bytes(tensor: TensorProto, base: Path) -> bytes:
    """The tensor's bytes as stored: ``raw_data``, its external file's slice, or (typed
    fields) the array's bytes."""
    if tensor.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if not location or Path(location).name != location:
            raise MergeError(f"tensor {tensor.name!r} points outside its folder: {location!r}")
        with open(base / location, "rb") as f:
            f.seek(int(info.get("offset", 0)))
            length = info.get("length")
            return f.read(int(length)) if length is not None else f.read()
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    return np.ascontiguousarray(numpy_helper.to_array(tensor)).tobytes()


def merged_feeds(
    session_inputs: list[onnx.ValueInfoProto] | list, feeds: dict[str, np.ndarray], use_cache: bool
) -> dict[str, np.ndarray]:
    """The merged file's feeds for one call of a family: that graph's feeds, the branch flag,
    and 0-length (or zeros of the static size) values for the inputs the branch never reads."""
    out = dict(feeds)
    out[USE_CACHE_BRANCH] = np.array([use_cache])
    sizes = _dim_sizes(session_inputs, feeds)
    for value in session_inputs:
        if value.name in out:
            continue
        shape = [d if isinstance(d, int) else sizes.get(d, 0) for d in value.shape]
        out[value.name] = np.zeros(shape, dtype=_numpy_dtype(value.type))
    return out


def _dim_sizes(session_inputs: list, feeds: dict[str, np.ndarray]) -> dict[str, int]:
    """Sizes of symbolic dims (``batch_size``) as this call's fed inputs have them."""
    sizes: dict[str, int] = {}
    for value in session_inputs:
        array = feeds.get(value.name)
        if array is None:
            continue
        for d, size in zip(value.shape, array.shape):
            if isinstance(d, str):
                sizes.setdefault(d, int(size))
    return sizes


def _numpy_dtype(ort_type: str) -> np.dtype:
    name = ort_type[len("tensor(") : -1] if ort_type.startswith("tensor(") else ort_type
    return np.dtype({"float": "float32", "double": "float64", "bool": "bool"}.get(name, name))


def _widened(past: onnx.ValueInfoProto, first: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """One declaration for an input both branches read: a dim the two declare differently
    (``1`` with past, ``sequence_length`` without) becomes symbolic."""
    a, b = past.type.tensor_type, first.type.tensor_type
    if a.elem_type != b.elem_type or len(a.shape.dim) != len(b.shape.dim):
        raise MergeError(f"input {past.name!r} differs in type or rank between the graphs")
    merged = onnx.ValueInfoProto()
    merged.CopyFrom(past)
    for k, (da, db) in enumerate(zip(a.shape.dim, b.shape.dim)):
        if da == db:
            continue
        dim = merged.type.tensor_type.shape.dim[k]
        symbolic = da.dim_param or db.dim_param or f"{past.name}_dim{k}"
        dim.Clear()
        dim.dim_param = symbolic
    return merged


def _check_compatible(past: onnx.ModelProto, first: onnx.ModelProto) -> None:
    types = [[o.type.tensor_type.elem_type for o in m.graph.output] for m in (past, first)]
    if len(types[0]) != len(types[1]):
        raise MergeError(
            f"the graphs return {len(types[0])} and {len(types[1])} outputs: an If needs the "
            "same outputs in both branches"
        )
    if types[0] != types[1]:
        raise MergeError("the graphs' outputs differ in element types")
    opsets = [{o.domain: o.version for o in m.opset_import} for m in (past, first)]
    if opsets[0] != opsets[1]:
        raise MergeError(f"the graphs import different opsets ({opsets[0]} vs {opsets[1]})")
    functions = [
        {(f.domain, f.name): f.SerializeToString() for f in m.functions} for m in (past, first)
    ]
    if any(functions[0].get(k, v) != v for k, v in functions[1].items()) or set(functions[1]) - set(
        functions[0]
    ):
        raise MergeError("the graphs hold different local functions")


def _branch(
    graph: onnx.GraphProto,
    prefix: str,
    rename: dict[str, str],
    inputs: set[str],
    outer: set[str],
) -> onnx.GraphProto:
    """``graph``'s nodes as an If branch: initializers and inputs read from the outer
    scope, every other value prefixed so the two branches never share a name."""

    def name_of(value: str) -> str:
        if not value:
            return value
        if value in rename:
            return rename[value]
        if value in inputs:
            return value
        return f"{prefix}/{value}"

    nodes = []
    for node in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [name_of(v) for v in node.input]
        copy.output[:] = [name_of(v) for v in node.output]
        if copy.name:
            copy.name = f"{prefix}/{copy.name}"
        if any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in node.attribute
        ):
            raise MergeError(f"node {node.name or node.op_type} holds a subgraph: not merged")
        nodes.append(copy)
    outputs = []
    for value in graph.output:
        source = name_of(value.name)
        if source in outer:  # an input or weight returned as is: copy it into the branch
            target = f"{prefix}/{value.name}/out"
            nodes.append(helper.make_node("Identity", [source], [target]))
            source = target
        typed = onnx.ValueInfoProto()
        typed.CopyFrom(value)
        typed.name = source
        outputs.append(typed)
    return helper.make_graph(nodes, f"{prefix}_branch", [], outputs)


def _digest(tensor: TensorProto, raw: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{tensor.data_type}:{list(tensor.dims)}:".encode())
    h.update(raw)
    return h.hexdigest()
