"""A reproducer a maintainer can run: one graph, the feeds of its calls, torch's outputs.

Layout, ``<out>/bundles/<model>/<graph>/`` (the ONNX backend test-data layout, which
onnxruntime's ``onnx_test_runner``, Polygraphy's ``--load-inputs`` converters and
``onnx.numpy_helper`` read as they are):

- ``model.onnx`` (and its external data files, same names) — the graph replayed;
- ``test_data_set_<call>/input_<k>.pb`` — one ``TensorProto`` per graph input, named after
  the input; ``output_<k>.pb`` — torch's recorded outputs, in the graph's output order;
- ``bundle.json`` — the model, graph, calls, what observer-ci measured on each (max abs,
  rel), the tolerances, the environment, the command, what was left out past the size cap.

``observer-ci replay BUNDLE [--provider cuda]`` reruns onnxruntime on it and prints the
same discrepancy. Written for every graph with a failing call (``--bundles all``: every
graph); at most :data:`BUNDLE_MAX_BYTES` per model, calls beyond it left out (said in
``bundle.json``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from observer_ci.core.constants import DEFAULT_OPSET

BUNDLE_MAX_BYTES = 50 << 20
BUNDLE_FILE = "bundle.json"
BUNDLE_GRAPH = "model.onnx"
BUNDLE_MODES = ("failing", "all", "none")
# what ``observer-ci replay`` imports beside the package (no torch, no transformers): a
# maintainer installs ``pip install --no-deps observer-ci`` and these (:func:`install_command`)
REPLAY_REQUIREMENTS = ("onnxruntime", "onnx", "numpy")
PROVIDERS = {  # the names users type -> onnxruntime's
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "dml": "DmlExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}


def write_bundle(
    folder: Path,
    *,
    model: str,
    graph: str,
    onnx_path: Path,
    calls: list[tuple[int, dict[str, Any], list[Any], dict[str, Any]]],
    output_names: list[str],
    tolerances: dict[str, float],
    environment: dict[str, Any],
    budget: int = BUNDLE_MAX_BYTES,
) -> tuple[Path, int]:
    """Writes one graph's bundle; ``calls`` are ``(call number, feeds by input name, torch's
    flat outputs, what was measured)``. Returns the folder and the bytes written (counted
    against the model's ``budget``)."""
    from onnx import numpy_helper

    from observer_ci.pipeline.diff import comparable_array
    from observer_ci.pipeline.export_cache import link_or_copy
    from observer_ci.pipeline.family_server import external_data_files

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    used, left_out = 0, []
    graph_files = [onnx_path, *external_data_files(onnx_path)]
    graph_bytes = sum(f.stat().st_size for f in graph_files)
    if graph_bytes > budget:
        left_out.append(
            f"the graph ({graph_bytes / 2**20:.0f} MB, over the {budget >> 20} MB cap): "
            f"take it from the run's {onnx_path.name}"
        )
    else:
        for source in graph_files:
            name = BUNDLE_GRAPH if source == onnx_path else source.name
            link_or_copy(source, folder / name)
        used += graph_bytes
    written = []
    for number, feeds, outputs, measured in calls:
        protos = [numpy_helper.from_array(array, name) for name, array in feeds.items()]
        expected = [
            numpy_helper.from_array(comparable_array(t), name)
            for t, name in zip(outputs, [*output_names, *[""] * len(outputs)])
        ]
        size = sum(p.ByteSize() for p in [*protos, *expected])
        if used + size > budget:
            left_out.append(f"call {number} ({size / 2**20:.1f} MB, over the cap)")
            continue
        data = folder / f"test_data_set_{number}"
        data.mkdir()
        for kind, tensors in (("input", protos), ("output", expected)):
            for k, proto in enumerate(tensors):
                (data / f"{kind}_{k}.pb").write_bytes(proto.SerializeToString())
        used += size
        written.append({"call": number, "folder": data.name, **measured})
    facts = {
        "model": model,
        "graph": graph,
        "opset": DEFAULT_OPSET,
        "calls": written,
        "tolerances": tolerances,
        "environment": environment,
        "install": install_command(environment),
        "command": "observer-ci replay PATH/TO/THIS/FOLDER [--provider cuda]",
        "left_out": left_out,
    }
    (folder / BUNDLE_FILE).write_text(json.dumps(facts, indent=2), encoding="utf-8")
    return folder, used


def install_command(environment: dict[str, Any]) -> str:
    """The pip line that makes a fresh environment able to replay: observer-ci without its
    dependencies (torch is not needed), then :data:`REPLAY_REQUIREMENTS` at the versions of
    the run where ``environment`` records them."""
    from observer_ci import __version__

    pinned = [
        f"{name}=={environment[name]}" if environment.get(name) else name
        for name in REPLAY_REQUIREMENTS
    ]
    return f"pip install --no-deps observer-ci=={__version__} && pip install {' '.join(pinned)}"


def replay_bundle(folder: str | os.PathLike[str], provider: str = "cpu") -> list[dict[str, Any]]:
    """Reruns onnxruntime on a bundle: per call, the max abs / rel now and as recorded."""
    import onnxruntime as ort
    from onnx import TensorProto, numpy_helper

    from observer_ci.pipeline.diff import judge_outputs, max_diff

    folder = Path(folder)
    facts = json.loads((folder / BUNDLE_FILE).read_text(encoding="utf-8"))
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}: one of {', '.join(PROVIDERS)}")
    available = ort.get_available_providers()
    if PROVIDERS[provider] not in available:
        raise ValueError(
            f"provider {provider!r} is not available in this onnxruntime "
            f"(installed: {', '.join(available)})"
        )
    if not (folder / BUNDLE_GRAPH).is_file():
        raise ValueError(f"the bundle holds no graph: {'; '.join(facts.get('left_out', []))}")
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(
        str(folder / BUNDLE_GRAPH), options, providers=[PROVIDERS[provider]]
    )

    def load(path: Path) -> tuple[str, Any]:
        proto = TensorProto()
        proto.ParseFromString(path.read_bytes())
        return proto.name, numpy_helper.to_array(proto)

    tolerances = facts["tolerances"]
    outputs = [tuple(o) for o in tolerances.get("outputs", [])]  # the policy file's
    rows = []
    for call in facts["calls"]:
        data = folder / call["folder"]
        feeds = dict(load(p) for p in sorted(data.glob("input_*.pb"), key=_position))
        expected = [load(p)[1] for p in sorted(data.glob("output_*.pb"), key=_position)]
        diff = max_diff(expected, session.run(None, feeds))
        within, _ = judge_outputs(
            diff,
            tolerances.get("output_paths", []),
            tolerances["abs_max"],
            tolerances["rel_max"],
            outputs,
        )
        rows.append(
            {
                "call": call["call"],
                "abs": diff.abs,
                "rel": diff.rel,
                "within": within,  # each output at its own tolerance, where it has one
                "errors": diff.errors,
                "recorded_abs": call.get("abs"),
                "recorded_rel": call.get("rel"),
            }
        )
    return rows


def _position(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])
