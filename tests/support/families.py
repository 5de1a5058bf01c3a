"""Shared by the model-family tests: run example scripts once per module, check a model
was exported, every call replayed within tolerance on its graph, and every graph probed."""

from __future__ import annotations

from pathlib import Path

from observer_ci.results import STATUS_OK, ModelResult
from observer_ci.run import RunConfig, run_scripts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FAMILIES = EXAMPLES / "families"
FAST = RunConfig(warmup=0, repeat=1)


def run_examples(tmp_path_factory, *scripts: Path) -> dict[str, ModelResult]:
    """The models of ``scripts``, by name, from one run with fast timing settings."""
    out = tmp_path_factory.mktemp("families")
    results = run_scripts(scripts, out, config=FAST, progress=lambda _message: None)
    return results.by_name()


def assert_served_and_probed(model: ModelResult) -> None:
    assert model.status == STATUS_OK, model.error
    assert model.graphs and model.export is model.graphs[0].export
    served = sorted(i for g in model.graphs for i in g.observation_indices)
    assert served == list(range(model.n_observations))  # every call has exactly one graph
    for row in model.observations:
        assert row.success and row.abs < 1e-4, row
        assert row.family in {g.name for g in model.graphs}
    for graph in model.graphs:
        assert graph.export.ok and Path(graph.export.onnx_path).is_file()
        assert graph.probe.ran and graph.probe.success, (graph.name, graph.probe)
