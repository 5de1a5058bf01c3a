"""Weights saved beside the graph (external data): two call families renamed into their
folder with their weights, the merged decoder streamed into its own data file, the export
cache storing and restoring every file, every call matching torch."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from observer_ci.pipeline import export  # noqa: E402
from observer_ci.pipeline.config import RunConfig  # noqa: E402
from observer_ci.pipeline.merged_decoder import MERGED_NAME  # noqa: E402
from observer_ci.pipeline.scripts import run_scripts  # noqa: E402
from tests.support.families import FAMILIES, assert_served_and_probed  # noqa: E402

SCRIPT = FAMILIES / "mistral_sliding_window.py"


@pytest.fixture(scope="module")
def cold_and_hit(tmp_path_factory):
    root = tmp_path_factory.mktemp("external")
    config = RunConfig(warmup=0, repeat=1, cache_dir=str(root / "cache"), cache_max_bytes=None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export, "EXTERNAL_DATA_MIN_BYTES", 0)  # every graph keeps its weights aside
        runs = [
            run_scripts([SCRIPT], root / name, config=config, progress=lambda _m: None)
            for name in ("cold", "hit")
        ]
    return [r.by_name()["mistral_sliding_window"] for r in runs]


def test_every_graph_keeps_its_weights_in_its_own_folder_and_matches(cold_and_hit):
    for model in cold_and_hit:
        assert_served_and_probed(model)
        graphs = {g.name: g for g in model.graphs}
        assert set(graphs) == {"decoder_model", "decoder_with_past_model", MERGED_NAME}
        for graph in graphs.values():
            onnx_path = Path(graph.export.onnx_path)
            data = sorted(onnx_path.parent.glob("*.data"))
            assert data and all(d.parent == onnx_path.parent for d in data)
            assert graph.export.file_size > onnx_path.stat().st_size  # the weights count too
        merged = graphs[MERGED_NAME]
        assert merged.success and merged.abs < 1e-4
        assert (Path(merged.export.onnx_path).parent / f"{MERGED_NAME}.onnx.data").is_file()
        assert "initializers stored once" in merged.reason


def test_a_hit_restores_the_weights_beside_each_graph(cold_and_hit):
    cold, hit = cold_and_hit
    for graph in hit.graphs:
        assert graph.export.cached
    cold_files = sorted(p.name for p in Path(cold.export.onnx_path).parent.iterdir())
    hit_files = sorted(p.name for p in Path(hit.export.onnx_path).parent.iterdir())
    assert hit_files == cold_files


def test_a_hit_does_not_merge_the_decoders_again(cold_and_hit):
    """The merged decoder is cached under both families' keys: a hit links it (and checks
    it on every call) instead of streaming every tensor into a new file."""
    cold, hit = cold_and_hit
    cold_merged, hit_merged = ({g.name: g for g in m.graphs}[MERGED_NAME] for m in (cold, hit))
    assert not cold_merged.export.cached and hit_merged.export.cached
    assert hit_merged.export.node_count == cold_merged.export.node_count
    assert hit_merged.reason == cold_merged.reason  # the merge's facts travel with the entry
    assert hit_merged.success and hit_merged.abs == cold_merged.abs
