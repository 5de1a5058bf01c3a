"""Warnings for a graph that works but is not what the user probably thinks.

Each warning is computed from one ``ModelResult`` alone (so ``results.json`` carries
them and a report can be re-rendered from the file) and names a rule of
``rules.RULE_TABLE`` that ``fail_on`` can select; none gates by default. Torch-free.
"""

from __future__ import annotations

from observer_ci.core.errors import listed
from observer_ci.core.results import ExportResult, GraphWarning, InputInfo, ModelResult

SINGLE_CALL = "single_call"
SIZE_ONE_DIM = "size_one_dim"
STAND_IN_INPUT = "stand_in_input"
DIM_STATIC_IN_ONNX = "dim_static_in_onnx"
PROBE_SEEN_SIZE = "probe_seen_size"
WARNING_RULES = (SINGLE_CALL, SIZE_ONE_DIM, STAND_IN_INPUT, DIM_STATIC_IN_ONNX, PROBE_SEEN_SIZE)

_MAX_LISTED = 4


def graph_warnings(model: ModelResult) -> list[GraphWarning]:
    """Every warning that applies to ``model``, in rule order."""
    found: list[GraphWarning] = []
    for check in (_single_call, _size_one, _stand_ins, _static_in_onnx, _probe_seen_size):
        found.extend(check(model))
    return found


def dim_label(info: InputInfo, dim: int) -> str:
    """``input_ids dim 0 (batch_size)``; without a name ``input_ids dim 0``."""
    name = _name_of(info, dim)
    return f"{info.name} dim {dim}" + (f" ({name})" if name else "")


def _name_of(info: InputInfo, dim: int) -> str | None:
    if dim in info.dynamic_dims and len(info.dim_names) == len(info.dynamic_dims):
        return info.dim_names[info.dynamic_dims.index(dim)]
    return None


def _listed(items: list[str]) -> str:
    return listed(items, _MAX_LISTED)


def _shape_text(dims: list[int | str]) -> str:
    return "×".join(str(d) for d in dims) if dims else "()"


def _sizes(info: InputInfo, dim: int, calls: list[int] | None = None) -> list[int]:
    """Sizes of ``dim`` over the observed calls (only ``calls`` when given)."""
    shapes = (
        info.shapes if calls is None else [info.shapes[i] for i in calls if i < len(info.shapes)]
    )
    return sorted({s[dim] for s in shapes if s is not None and dim < len(s)})


def _single_call(model: ModelResult) -> list[GraphWarning]:
    export = model.export
    if export is None or not export.ok or not model.inputs:
        return []
    any_dynamic = any(info.dynamic_dims for info in model.inputs)
    if model.n_observations > 1 and any_dynamic:
        return []
    accepted = [f"{n} {_shape_text(d)}" for n, d in export.input_dims.items()]
    if model.n_observations <= 1:
        what = "only one call was observed"
    else:
        what = f"the {model.n_observations} observed calls all had the same shapes"
    if any_dynamic:
        message = f"{what}: only the flagged dims are dynamic; the ONNX file accepts " + _listed(
            accepted
        )
    else:
        message = f"{what}: every dim is static, the ONNX file accepts only " + _listed(accepted)
    return [
        GraphWarning(
            SINGLE_CALL,
            message,
            "observe at least two calls with different sizes (batch, sequence length) so "
            "the export makes those dims dynamic",
        )
    ]


def _size_one(model: ModelResult) -> list[GraphWarning]:
    by_name: dict[str, list[str]] = {}
    for info in model.inputs:
        for d in info.dynamic_dims:
            if _sizes(info, d) == [1]:
                key = _name_of(info, d) or f"{info.name} dim {d}"
                by_name.setdefault(key, []).append(f"{info.name} dim {d}")
    return [
        GraphWarning(
            SIZE_ONE_DIM,
            f"{name} ({_listed(axes)}) should be dynamic but was 1 in every call: torch.export "
            "may bake the 1 into the graph",
            f"observe one call with {name} >= 2",
        )
        for name, axes in by_name.items()
    ]


def _stand_ins(model: ModelResult) -> list[GraphWarning]:
    found = []
    for obs in model.observations:
        if not obs.n_none or obs.success:
            continue  # a row that matched torch shows the stand-in changed nothing
        absent = [
            info.name
            for info in model.inputs
            if obs.index < len(info.shapes) and info.shapes[obs.index] is None
        ]
        outcome = "the row did not match torch"
        found.append(
            GraphWarning(
                STAND_IN_INPUT,
                f"call {obs.index} did not pass {_listed(absent) or 'some inputs'}: its row "
                "was replayed with an empty stand-in (size 0 on a dynamic dim), not with what "
                f"the model saw ({outcome})",
                "if the model treats None and empty differently, pass the input in every "
                "call, or give observe(..., missing={name: value}) a stand-in",
            )
        )
    return found


def _static_in_onnx(model: ModelResult) -> list[GraphWarning]:
    found = []
    for export, calls, graph in _exports_and_calls(model):
        for info in model.inputs:
            dims = export.input_dims.get(info.name)
            if dims is None:
                continue
            for d in info.dynamic_dims:
                sizes = _sizes(info, d, calls)
                if d >= len(dims) or not isinstance(dims[d], int):
                    continue
                if calls is not None and len(sizes) < 2:
                    continue  # a family's graph is judged on the calls it serves
                found.append(
                    GraphWarning(
                        DIM_STATIC_IN_ONNX,
                        f"{dim_label(info, d)} varied across {graph}calls (sizes "
                        f"{', '.join(map(str, sizes))}) but is static ({dims[d]}) in "
                        "the ONNX file: other sizes will be rejected",
                        "find the model code that fixes this size while tracing (a comparison "
                        "with a constant, a reshape to fixed sizes) and derive it from the input",
                    )
                )
    return found


def _exports_and_calls(model: ModelResult) -> list[tuple[ExportResult, list[int] | None, str]]:
    """``(export, calls it serves, "graph X's ")`` per exported graph; one graph serves all."""
    if len(model.graphs) > 1:
        return [
            (g.export, g.observation_indices, f"graph {g.name}'s ")
            for g in model.graphs
            if g.export is not None and g.export.ok
        ]
    if model.export is None or not model.export.ok:
        return []
    return [(model.export, None, "")]


def _probe_seen_size(model: ModelResult) -> list[GraphWarning]:
    probe = model.probe
    if probe is None or not probe.ran or probe.success or not probe.shapes:
        return []
    by_name: dict[str, tuple[int, int, list[str]]] = {}
    for info in model.inputs:
        probed = probe.shapes.get(info.name)
        for d in info.dynamic_dims:
            seen = _sizes(info, d)
            if probed is None or d >= len(probed) or len(seen) != 1 or probed[d] == seen[0]:
                continue
            key = _name_of(info, d) or f"{info.name} dim {d}"
            by_name.setdefault(key, (seen[0], probed[d], []))[2].append(f"{info.name} dim {d}")
    return [
        GraphWarning(
            PROBE_SEEN_SIZE,
            f"the unseen-shape probe failed and {name} ({_listed(axes)}) was {seen} in every "
            f"call (probed with {probed}): the graph may only work for {name} = {seen}",
            f"observe one call with another {name} (>= 2)",
        )
        for name, (seen, probed, axes) in by_name.items()
    ]
