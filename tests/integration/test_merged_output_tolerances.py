"""The merged decoder is checked at the tolerances the calls are judged by: a policy file
that gives every output its own limit (the model's own is 0 here, which float rounding
always exceeds) must not leave the merged file "not matching torch" while both graphs
match."""

import dataclasses

import pytest

pytest.importorskip("transformers", reason="optional extra 'transformers' is not installed")

from observer_ci.core.results import STATUS_OK  # noqa: E402
from observer_ci.pipeline.merged_decoder import MERGED_NAME  # noqa: E402
from observer_ci.pipeline.scripts import run_scripts  # noqa: E402
from tests.support.families import FAMILIES, FAST  # noqa: E402


def test_the_merged_decoder_is_judged_at_the_outputs_own_tolerances(tmp_path):
    config = dataclasses.replace(
        FAST, atol=0.0, model_output_tolerances=(("t5_decoder", "*", 1e-3, None),)
    )
    results = run_scripts([FAMILIES / "t5_generate.py"], tmp_path, config=config, progress=print)
    model = results.by_name()["t5_decoder"]
    assert model.status == STATUS_OK, model.error
    assert any(o.abs > 0.0 for o in model.observations)  # over the model's own 0...
    assert all(o.success for o in model.observations)  # ...within every output's 1e-3
    (merged,) = [g for g in model.graphs if g.name == MERGED_NAME]
    assert merged.abs is not None and merged.abs > 0.0
    assert merged.success, (merged.reason, merged.abs)
    assert not any("did not match torch" in n for n in model.notes), model.notes
