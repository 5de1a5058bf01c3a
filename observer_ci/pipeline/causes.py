"""Why a model failed, in the user's terms: a cause, their own source line, a next step.

Each failure class has one classifier here and one message template; exception text is
matched on stable fragments of torch / onnxruntime messages. Unknown errors get their
headline as summary and no next step (the error tail stays in the result). Torch-free:
fx nodes and observers are read through attributes only.
"""

from __future__ import annotations

import os
import re
import sysconfig
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from observer_ci.core.constants import MASKED_POSITIONS_ONLY
from observer_ci.core.errors import ANSI_ESCAPE, error_headline, listed
from observer_ci.core.results import Cause
from observer_ci.pipeline.graph_warnings import dim_label

DATA_DEPENDENT = "data_dependent_branch"
UNSUPPORTED_OP = "unsupported_op"
UNREGISTERED_TYPE = "unregistered_type"
CONSTRAINT_VIOLATION = "constraint_violation"
ORT_FAILURE = "ort_failure"
PROBE_FAILURE = "probe_failure"
SCRIPT_ERROR = "script_error"
INPUT_NAME = "input_name"
DROPPED_STATE = "dropped_state"
NEVER_CALLED = "never_called"
UNKNOWN = "unknown"

_PACKAGE_DIR = str(Path(__file__).resolve().parent)
_LIBRARY_DIRS = tuple(
    str(Path(p).resolve())
    for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if p
)
_FILE_LINE_RE = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in \S+\n[ \t]*(?P<code>\S[^\n]*)'
)
_FX_COMMENT_RE = re.compile(r"# File: (?P<file>\S+?):(?P<line>\d+) in \S+, code: (?P<code>[^\n]+)")
_MAX_CODE = 160


# -- the user's own source line ------------------------------------------------------


def is_user_file(filename: str) -> bool:
    """True for files of the user's project: not Python, not installed packages, not us."""
    if not filename or filename.startswith("<"):
        return False
    path = str(Path(filename).resolve())
    if "site-packages" in path or "dist-packages" in path or path.startswith(_PACKAGE_DIR):
        return False
    return not path.startswith(_LIBRARY_DIRS)


def format_frame(filename: str, line: int | str, code: str | None) -> str:
    """``models/net.py:12: if x.sum() > 0:`` (path relative to the working directory)."""
    try:
        shown = os.path.relpath(filename)
        if shown.startswith(".."):
            shown = filename
    except ValueError:
        shown = filename
    code = (code or "").strip()
    if len(code) > _MAX_CODE:
        code = code[: _MAX_CODE - 1] + "…"
    return f"{shown}:{line}: {code}" if code else f"{shown}:{line}"


def user_frame(exc: BaseException | None, text: str | None = None) -> str | None:
    """The deepest place the failure passes through user code.

    Looked for in order: the fx node being translated (conversion errors), the
    "following call raised this error" block of torch messages, the traceback frames
    of the exception chain, any ``File "...", line N`` in the text.
    """
    for candidate in (_node_frame(exc), _text_frame(_chain_text(exc) if exc else text or "")):
        if candidate:
            return candidate
    frames = [f for e in _chain(exc) for f in traceback.extract_tb(e.__traceback__)]
    mine = [f for f in frames if is_user_file(f.filename)]
    if mine:
        f = mine[-1]
        return format_frame(f.filename, f.lineno or 0, f.line)
    return None


def _text_frame(text: str) -> str | None:
    marker = text.rfind("The following call raised this error")
    scopes = [text[marker:]] if marker >= 0 else []
    scopes.append(text)
    for scope in scopes:
        for regex in (_FILE_LINE_RE, _FX_COMMENT_RE):
            hits = [m for m in regex.finditer(scope) if is_user_file(m.group("file"))]
            if hits:
                m = hits[-1]
                return format_frame(m.group("file"), m.group("line"), m.group("code"))
    return None


def _fx_node(exc: BaseException | None) -> Any:
    """The fx node being translated when the ONNX conversion failed, if any."""
    for e in _chain(exc):
        tb = e.__traceback__
        while tb is not None:
            node = tb.tb_frame.f_locals.get("node")
            if node is not None and isinstance(getattr(node, "meta", None), dict):
                return node
            tb = tb.tb_next
    return None


def _node_frame(exc: BaseException | None) -> str | None:
    node = _fx_node(exc)
    stack = node.meta.get("stack_trace") if node is not None else None
    return _text_frame(stack) if stack else None


def _node_module(exc: BaseException | None) -> str | None:
    node = _fx_node(exc)
    stack = node.meta.get("nn_module_stack") if node is not None else None
    if not stack:
        return None
    path, kind = list(stack.values())[-1]
    type_name = getattr(kind, "__name__", None) or str(kind).rsplit(".", 1)[-1].strip("'>")
    path = str(path).replace("L['self'].", "").replace("L['self']", "")
    return f"{path} ({type_name})" if path else type_name


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _chain_text(exc: BaseException | None) -> str:
    return ANSI_ESCAPE.sub("", "\n".join(f"{type(e).__name__}: {e}" for e in _chain(exc)))


# -- classification ------------------------------------------------------------------


def explain_exception(exc: BaseException, *, observer: Any = None) -> Cause:
    """The cause of an exception raised while inferring, exporting or running a script."""
    text = _chain_text(exc)
    frame = user_frame(exc)
    classifiers = (
        _dropped_cache,
        _image_grid_values,
        _data_dependent,
        _unsupported_op,
        _unregistered_type,
        _constraint,
        _input_name,
    )
    for classify in classifiers:
        cause = classify(text, exc, observer)
        if cause is not None:
            cause.user_frame = cause.user_frame or frame
            return cause
    return Cause(UNKNOWN, error_headline(text) or type(exc).__name__, None, frame)


def never_called(method_name: str = "forward") -> Cause:
    """A model whose ``observe(...)`` block was entered but which was never called in it."""
    call = "model(...)" if method_name == "forward" else f"model.{method_name}(...)"
    return Cause(
        NEVER_CALLED,
        f"`observe(model)` was entered but `{call}` was never called inside it, so there "
        "are no inputs to export it with",
        f"call `{call}` inside the `with observer_ci.observe(model, name=...):` block, once "
        "per input shape to check (at least two sizes make a dim dynamic)",
    )


def explain_script_error(exc: BaseException) -> Cause:
    """A failing observation script: the classified cause, or its own error and line."""
    cause = explain_exception(exc)
    if cause.kind == UNKNOWN:
        cause.kind = SCRIPT_ERROR
        cause.next_step = "fix the observation script (it must run on its own with python)"
    return cause


_DATA_DEPENDENT_MARKERS = (
    "GuardOnDataDependentSymNode",
    "data-dependent expression",
    "data dependent",
)
# transformers code that sizes tensors from the values of an image grid input (Qwen2-VL,
# Qwen2.5-VL, GLM-4V: ``image_grid_thw``) or from where the image tokens sit in the prompt
_IMAGE_GRID_CODE = ("vision_utils.py", "get_vision_position_ids", "get_rope_index", "grid_thw")


def _image_grid_values(text: str, exc: BaseException, observer: Any) -> Cause | None:
    if not any(m in text for m in _DATA_DEPENDENT_MARKERS):
        return None
    if not any(m in text for m in _IMAGE_GRID_CODE):
        return None
    names = []
    if observer is not None:
        try:
            names = sorted({n for n in observer.leaf_names() if "grid_thw" in n})
        except Exception:
            names = []
    grid = " and ".join(f"`{n}`" for n in names) or "the image grid (`image_grid_thw`)"
    return Cause(
        DATA_DEPENDENT,
        f"the vision code reads the values of {grid} (`.tolist()` / `.item()` in "
        "transformers' vision position ids and 3-D RoPE index) and the token layout of the "
        "prompt to size its tensors: torch.export records shapes, not values, so the image "
        "prefill has no graph (the decode steps export; observer-ci's export patches cover "
        "Qwen2-VL's vision tower, not window attention (Qwen2.5-VL) nor the 3-D RoPE index "
        "when generate() does not pass positions)",
        "observe the language model the multimodal model calls, around the same "
        "generate(): `observer_ci.observe(model.model.language_model, name=...)`; it takes "
        "the `inputs_embeds` and 3-D `position_ids` the vision code computed in torch and "
        "exports, prefill and decode (examples/families/qwen2_vl_image_text.py)",
    )


def _data_dependent(text: str, exc: BaseException, observer: Any) -> Cause | None:
    if not any(m in text for m in _DATA_DEPENDENT_MARKERS):
        return None
    return Cause(
        DATA_DEPENDENT,
        "the model branches on the values inside a tensor (data-dependent control flow); "
        "torch.export records shapes, not values, so it cannot follow a Python `if` on them",
        "compute both branches and pick with `torch.where(cond, a, b)` (or multiply by a "
        "mask), or use `torch.cond(pred, true_fn, false_fn, (x,))` when both must stay",
    )


_NO_ONNX_FUNCTION_RE = re.compile(
    r"No ONNX function found for <OpOverload\(op='([^']+)', overload='([^']+)'\)>"
)
_NO_ONNX_PLAIN_RE = re.compile(r"No ONNX function found for ([\w.:]+)")


def _unsupported_op(text: str, exc: BaseException, observer: Any) -> Cause | None:
    m = _NO_ONNX_FUNCTION_RE.search(text)
    if m:
        op = f"{m.group(1)}.{m.group(2)}"
    else:
        plain = _NO_ONNX_PLAIN_RE.search(text)
        if not plain:
            return None
        op = plain.group(1)
    module = _node_module(exc)
    where = f", called in {module}" if module else ""
    if "grouped_mm" in op:
        return Cause(
            UNSUPPORTED_OP,
            f"the mixture-of-experts kernel `{op}` has no ONNX translation in torch.onnx"
            f"{where}: transformers runs experts with `grouped_mm` by default",
            "switch the experts to batched matrix products before observing: "
            '`model.set_experts_implementation("batched_mm")` (it exports)',
        )
    return Cause(
        UNSUPPORTED_OP,
        f"the operator `{op}` has no ONNX translation in torch.onnx{where}",
        f"rewrite that call with operators that export (e.g. in a module you export instead), "
        f"or give torch.onnx.export a translation: "
        f"`custom_translation_table={{torch.ops.{op}: onnxscript_function}}`",
    )


_UNKNOWN_OUTPUT_RE = re.compile(r"Found <class '([^']+)'> in output, which is not a known type")
_NO_KEYS_FN_RE = re.compile(r"Did not find a flatten_with_keys_fn for type: <class '([^']+)'>")
_MISSING_ARG_RE = re.compile(r"missing a required argument: '(\w+)'")


def _register_hint(type_name: str) -> str:
    short = type_name.rsplit(".", 1)[-1]
    return (
        f"register {short} as a pytree before observing: `torch.export.register_dataclass"
        f"({short})` for a dataclass, else `torch.utils._pytree.register_pytree_node({short}, "
        f"flatten_fn, unflatten_fn, flatten_with_keys_fn=...)`"
    )


def _unregistered_type(text: str, exc: BaseException, observer: Any) -> Cause | None:
    m = _UNKNOWN_OUTPUT_RE.search(text)
    if m:
        return Cause(
            UNREGISTERED_TYPE,
            f"the model returns a {m.group(1)}, a type torch.export cannot flatten into tensors",
            _register_hint(m.group(1)),
        )
    m = _NO_KEYS_FN_RE.search(text)
    if m:
        return Cause(
            UNREGISTERED_TYPE,
            f"{m.group(1)} is registered as a pytree without `flatten_with_keys_fn`, "
            "which torch.export needs to name its tensors",
            _register_hint(m.group(1)),
        )
    m = _MISSING_ARG_RE.search(text)
    if m and observer is not None:
        holder = _tensor_holder(observer, m.group(1))
        if holder:
            return Cause(
                UNREGISTERED_TYPE,
                f"input {m.group(1)!r} is a {holder} holding tensors, a type torch's pytree "
                "does not know: it was not recorded as an input, so the export misses it",
                _register_hint(holder),
            )
    return None


def _dropped_cache(text: str, exc: BaseException, observer: Any) -> Cause | None:
    """A cache object (``StaticCache``...) no pytree opens: the export ran without it."""
    if observer is None:
        return None
    passed = {name for obs in observer.observations for name in obs.named}
    for obs in observer.observations:
        for name, why in obs.ignored.items():
            if name not in passed and why.endswith("Cache"):
                return Cause(
                    UNREGISTERED_TYPE,
                    f"input {name!r} is a {why}, which observer-ci cannot flatten into "
                    "tensors (it flattens DynamicCache and EncoderDecoderCache): the export "
                    "was traced without it, so the graph does not match the observed calls",
                    "observe generate() with the default dynamic cache (drop "
                    "`cache_implementation=...`), or export a wrapper that keeps the static "
                    "cache as buffers (transformers.integrations.executorch."
                    "TorchExportableModuleWithStaticCache)",
                )
    return None


def explain_dropped_state(name: str, holder: str, paths: Sequence[str]) -> Cause:
    """An input holds tensors that became no graph input: the graph runs without them."""
    return Cause(
        DROPPED_STATE,
        f"input {name!r} (a {holder}) keeps {len(paths)} tensor(s) that are no input of the "
        f"graph: {listed(list(paths), 3)}; the export ran without them, so the graph does "
        "not carry the model's state (a match on the observed calls proves nothing)",
        f"pass that state as tensors, or register {holder} as a pytree before observing "
        "(`torch.utils._pytree.register_pytree_node`); for a transformers cache, observe "
        "with the default `DynamicCache` (observer-ci flattens its key/value, convolution "
        "and recurrent layers)",
    )


def _input_name(text: str, exc: BaseException, observer: Any) -> Cause | None:
    """An input name torch.export writes into generated Python code, which it cannot be."""
    if observer is None or "SyntaxError" not in text or "<eval_with_key>" not in text:
        return None
    bad = [n for n in observer.leaf_names() if not n.isidentifier()]
    if not bad:
        return None
    return Cause(
        INPUT_NAME,
        f"the input name {bad[0]!r} is not a Python identifier: torch.export generates "
        "Python code with the keyword argument names of `**kwargs`",
        "pass such inputs under identifier names (letters, digits, underscores), or inside "
        "a dict argument (its keys may be any text)",
    )


def _tensor_holder(observer: Any, name: str) -> str | None:
    """The type name of an observed argument that keeps tensors in its attributes."""
    params = list(observer.signature.parameters) if observer.signature is not None else []
    for obs in observer.observations:
        value = obs.kwargs.get(name)
        if value is None and name in params and params.index(name) < len(obs.args):
            value = obs.args[params.index(name)]
        attrs = getattr(value, "__dict__", None)
        if attrs and any(type(v).__name__ in ("Tensor", "Parameter") for v in attrs.values()):
            return f"{type(value).__module__}.{type(value).__qualname__}"
    return None


_STATIC_HINT_RE = re.compile(
    r"tracing inferred a static shape of (\d+) for dimension "
    r"inputs((?:\[[^\]]+\])+)\.shape\[(\d+)\]"
)
_SPECIALIZED_RE = re.compile(r"specialized (?:it )?to be a constant \((\d+)\)")
_L_PATH_RE = re.compile(r"L\['(\w+)'\]((?:\[[^\]]+\])*)\.size\(\)\[(\d+)\]")


def _leaf_from_path(path: str) -> str:
    """``['past_key_values']['key_cache'][0]`` -> ``past_key_values_key_cache_0``."""
    return "_".join(p.strip("'\"") for p in re.findall(r"\[([^\]]+)\]", path))


def _constraint(text: str, exc: BaseException, observer: Any) -> Cause | None:
    m = _STATIC_HINT_RE.search(text)
    if m:
        size, leaf, dim = int(m.group(1)), _leaf_from_path(m.group(2)), int(m.group(3))
    else:
        s = _SPECIALIZED_RE.search(text)
        p = _L_PATH_RE.search(text)
        if not (s and "Constraints violated" in text):
            return None
        size = int(s.group(1))
        leaf = _leaf_from_path(f"['{p.group(1)}']{p.group(2)}") if p else "?"
        dim = int(p.group(3)) if p else -1
    seen = observed_sizes(observer, leaf, dim)
    if len(seen) == 1:
        marked = f"is marked dynamic but was {seen[0]} in every call, yet"
    else:
        marked = (
            "varied across the observed calls"
            + (f" (observed sizes {', '.join(map(str, seen))})" if seen else "")
            + ", but"
        )
    step = (
        f"find the code that compares {leaf}.shape[{dim}] with a constant or builds a fixed "
        "shape from it and derive it from the input instead; if the size is really fixed, "
        "observe calls with that one size"
    )
    if dim == 0 and len(seen) == 1:  # only set_batch_dimension_for marks such a dim 0
        step += (
            f"; if dim 0 of {leaf} is not a batch (Qwen2-VL's position_ids: 4 rows), leave "
            f"{leaf} out of set_batch_dimension_for (name the inputs that carry the batch)"
        )
    return Cause(
        CONSTRAINT_VIOLATION,
        f"input {leaf} dim {dim} {marked} the model code fixes it to {size} while tracing",
        step,
    )


def observed_sizes(observer: Any, leaf: str, dim: int) -> list[int]:
    """Distinct sizes of ``leaf``'s dim ``dim`` over the observed calls, in order."""
    if observer is None or dim < 0:
        return []
    try:
        j = observer.leaf_names().index(leaf)
    except ValueError:
        return []
    sizes: list[int] = []
    for i in range(observer.num_obs()):
        t = observer.aligned_inputs(i)[j]
        if t is not None and dim < t.dim() and int(t.shape[dim]) not in sizes:
            sizes.append(int(t.shape[dim]))
    return sizes


# -- onnxruntime ---------------------------------------------------------------------

_INVALID_DIM_RE = re.compile(
    r"Got invalid dimensions for input: (\S+) for the following indices\s+index: (\d+) "
    r"Got: (\d+) Expected: (\d+)"
)
_NODE_RE = re.compile(r"running (\w+) node\. Name:'([^']*)' Status Message: ([^\n]*)")


# "/onnxruntime_src/…/element_wise_ops.h:689 onnxruntime::Broadcaster::Broadcaster(…) "
_ORT_SOURCE_RE = re.compile(r"^/\S+:\d+ \S+?\(.*?\)\s+")

# Causes that do not depend on the observed call used as export sample.
SAMPLE_INDEPENDENT = frozenset({DATA_DEPENDENT, UNSUPPORTED_OP, UNREGISTERED_TYPE, INPUT_NAME})


def explain_ort_failure(
    text: str,
    *,
    call: int | None,
    stand_ins: Sequence[tuple[str, Sequence[int]]] = (),
) -> Cause:
    """onnxruntime failed on an observed call (or a probe): which input, dim, node.

    ``stand_ins`` lists the inputs the call did not pass, with the shape fed instead.
    """
    on = f" on call {call}" if call is not None else ""
    m = _INVALID_DIM_RE.search(text)
    if m:
        name, dim, got, expected = m.group(1), m.group(2), m.group(3), m.group(4)
        return Cause(
            ORT_FAILURE,
            f"onnxruntime rejected input {name} dim {dim}{on}: size {got}, but the ONNX file "
            f"only accepts {expected} (the dim is static in the graph)",
            f"observe calls where {name} dim {dim} varies (or flag it with "
            "set_batch_dimension_for) so the export makes it dynamic",
        )
    node = _NODE_RE.search(text)
    where = ""
    if node:
        message = _ORT_SOURCE_RE.sub("", node.group(3)).strip().rstrip(".")
        where = f" in the {node.group(1)} node {node.group(2)!r}: {message}"
    summary = f"onnxruntime failed{on}{where or ': ' + error_headline(text, 160)}"
    if stand_ins:
        shown = ", ".join(f"{n} (fed as {'×'.join(map(str, s))})" for n, s in stand_ins[:4])
        names = [n for n, _ in stand_ins]
        return Cause(
            ORT_FAILURE,
            f"{summary}. This call did not pass {shown}: the graph takes every input, so an "
            "empty stand-in was fed, and the model treats it differently from None",
            f"pass {names[0]} in every observed call, or give "
            f"`observe(..., missing={{{names[0]!r}: value}})` a value the model accepts",
        )
    return Cause(ORT_FAILURE, summary, None)


_NO_KERNEL_RE = re.compile(
    r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'"
)


def explain_missing_kernel(
    text: str, dtype: str | None, provider: str = "CPUExecutionProvider"
) -> Cause | None:
    """onnxruntime has no kernel for an operator of the graph on ``provider`` (a float16
    or bfloat16 graph on the CPU): which operator, which dtype, and a check that runs."""
    m = _NO_KERNEL_RE.search(text)
    if m is None:
        return None
    op, version, node = m.group(1), m.group(2), m.group(3)
    if dtype is None:
        return Cause(
            ORT_FAILURE,
            f"onnxruntime ({provider}) has no kernel for the {op}({version}) node {node!r} "
            "with the element types of this graph",
            f"cast the inputs of {op} to a type {provider} supports (float32) in the model",
        )
    return Cause(
        ORT_FAILURE,
        f"onnxruntime ({provider}) has no {dtype} kernel for {op} (node {node!r}): the model "
        f"computes in {dtype}, so its graph does too, and this provider cannot run it",
        f"check the model in float32: call `model.float()` in the observation script before "
        f"observing (and pass float32 inputs); the {dtype} graph itself needs a provider "
        f"with {dtype} kernels (e.g. CUDAExecutionProvider)",
    )


# -- probe ---------------------------------------------------------------------------


@dataclass
class BrokenDim:
    """A named dim whose unseen size alone makes onnxruntime fail."""

    name: str
    axes: list[str]  # "input_ids dim 0", ...
    size: int  # the unseen size that broke
    seen: list[int]  # the sizes of the observed calls


def explain_probe_failure(text: str, broken: Sequence[BrokenDim]) -> Cause:
    """The unseen-shape probe failed in onnxruntime: which dim and size broke."""
    if not broken:
        return Cause(
            PROBE_FAILURE,
            "onnxruntime failed on sizes never observed (no single dim alone breaks it): "
            + error_headline(text, 160),
            "observe calls whose dynamic sizes vary more, so the export does not assume "
            "relations the model does not have",
        )
    b = broken[0]
    axes = listed(b.axes, 3)
    seen = ", ".join(map(str, b.seen))
    summary = f"the ONNX graph fails when {b.name} ({axes}) is {b.size}, a size never observed"
    if len(b.seen) == 1:
        summary += (
            f": {b.name} was {seen} in every call, and torch.export baked {seen} into the graph"
        )
        grow = max(2, b.seen[0] + 1)
        step = f"observe at least one call with {b.name} = {grow} or more"
        if b.name == "batch_size":
            step += " (e.g. two prompts in one generate() call)"
    else:
        summary += f" (observed: {seen})"
        step = f"observe calls covering the sizes of {b.name} the file must accept"
    return Cause(PROBE_FAILURE, summary, step)


def probe_sizes(shapes: dict[str, list[int]]) -> str:
    """``input_ids 4×10, attention_mask 4×10``: the probe's inputs (four at most)."""
    return ", ".join(f"{n} {'×'.join(map(str, s))}" for n, s in list(shapes.items())[:4])


def explain_probe_mismatch(shapes: dict[str, list[int]], abs_error: float | None) -> Cause:
    """onnxruntime ran on unseen sizes but disagrees with torch."""
    shown = probe_sizes(shapes)
    error = f" (max abs error {abs_error:.3g})" if abs_error is not None else ""
    return Cause(
        PROBE_FAILURE,
        f"at sizes never observed ({shown}) onnxruntime and torch disagree{error}: the graph "
        "kept what the export sample's sizes decided (a branch on a size, a clamp, a slice)",
        "look for code that branches on a size (`if x.shape[0] == ...`) and make it "
        "size-independent or use torch.cond; observe calls that take every branch",
    )


def explain_probe_rounding(
    shapes: dict[str, list[int]], abs_error: float, rel_error: float, atol: float, rtol: float
) -> Cause:
    """onnxruntime ran on unseen sizes and is within ``abs_max`` everywhere, over ``rel_max``
    only: rounding at outputs near 0 (rel is |d| / (|expected| + 1e-3)), not a branch."""
    return Cause(
        PROBE_FAILURE,
        f"at sizes never observed ({probe_sizes(shapes)}) onnxruntime and torch differ by "
        f"{abs_error:.3g} at most, within abs_max {atol:.3g}, but the relative error "
        f"{rel_error:.3g} exceeds rel_max {rtol:.3g}: rounding where outputs are near 0, "
        "not another computation (a branch on a size shows as a large absolute error)",
        f"if a relative error of {rel_error:.2g} on outputs this close to 0 is acceptable, "
        f"raise rel_max for this model (policy file `rel_max: {2 * rel_error:.2g}`); "
        "otherwise observe a call at these sizes and compare its outputs",
    )


def explain_masked_only(
    mask: str, masked_abs: float, valid_abs: float, fast_path: bool, where: str = ""
) -> Cause:
    """An error only at the positions the input ``mask`` drops (``masks.py`` split it);
    ``fast_path``: the model holds nn.TransformerEncoder / nn.MultiheadAttention."""
    if fast_path:
        step = (
            "torch's fast path for nn.TransformerEncoder / nn.MultiheadAttention (eval, no "
            "grad) fills padded positions its own way; to compare them too, observe with "
            "`torch.backends.mha.set_fastpath_enabled(False)` or build the encoder with "
            "`enable_nested_tensor=False`"
        )
    else:
        step = (
            "the outputs at padded positions (attention mask 0, e.g. left padding) are "
            "unused: nothing to fix; add `masked_positions_only` to `fail_on` to fail on "
            "them anyway"
        )
    return Cause(
        MASKED_POSITIONS_ONLY,
        f"{where}the error lies only at positions the mask `{mask}` drops (max abs "
        f"{masked_abs:.3g} there, {valid_abs:.3g} at the positions it keeps): padding, whose "
        "outputs a caller ignores, not a wrong graph",
        step,
    )


def add_sample_difference(cause: Cause, inputs: Sequence[Any], call: int, sample: int) -> None:
    """Names the input dims where a failing call differs from the export sample.

    ``inputs`` are ``results.InputInfo`` (shapes per call, dynamic dims and their names).
    Only for onnxruntime failures without a known culprit (no next step yet).
    """
    if cause.kind != ORT_FAILURE or cause.next_step is not None or call == sample:
        return
    diffs = []
    for info in inputs:
        shapes = info.shapes
        if max(call, sample) >= len(shapes) or shapes[call] is None or shapes[sample] is None:
            continue
        for d, (got, exported) in enumerate(zip(shapes[call], shapes[sample])):
            if got != exported:
                diffs.append(f"{dim_label(info, d)} {got} vs {exported}")
    if not diffs:
        return
    shown = listed(diffs, 4)
    cause.summary += f"; this call differs from the export sample (call {sample}) in {shown}"
    cause.next_step = (
        "the graph only works for sizes like the export sample's on those dims: look for code "
        "that branches on them while tracing, or observe calls that make them vary"
    )
