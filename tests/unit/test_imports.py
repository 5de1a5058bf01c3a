"""The torch-free side of the process boundary stays torch-free (and pandas-free).

The static part is the import contract in ``pyproject.toml`` (``[tool.importlinter]``, run by
``lint-imports`` in ``make test``): core/, report/, github/ and action/ never import torch,
onnx, onnxruntime, numpy, pandas, transformers or the torch side. What the contract cannot
see is what a process loads at run time (``observer_ci.__getattr__`` and the CLI import
lazily): each check below runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT

HEAVY = ("torch", "pandas", "transformers", "onnxruntime", "numpy")
ROOT = REPO_ROOT


def loaded_after(code: str) -> dict[str, bool]:
    report = f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    probe = f"import sys\n{code}\nimport json\n{report}"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import observer_ci",
        # the action's parent, publish mode and the command line's dispatcher
        "import observer_ci.action.main, observer_ci.action.publish, observer_ci.cli",
        # report rendering (compare, merge)
        "import observer_ci.report.markdown, observer_ci.core.legs",
        "import observer_ci.report.variants, observer_ci.core.variants",
        "import observer_ci.report.policy, observer_ci.report.history",  # pandas: lazily
        "import observer_ci.pipeline.causes, observer_ci.pipeline.graph_warnings",
    ],
)
def test_torch_free_entry_points_load_nothing_heavy(code):
    loaded = loaded_after(code)
    assert not any(loaded.values()), f"{code!r} imported {[m for m, v in loaded.items() if v]}"


def test_the_pair_child_and_the_cache_store_load_numpy_but_not_torch():
    loaded = loaded_after("import observer_ci.pipeline.export_cache, observer_ci.pipeline.paired")
    assert [m for m, v in loaded.items() if v] == ["numpy"]


def test_the_observer_is_still_reachable_from_the_package():
    loaded = loaded_after("import observer_ci\nobserver_ci.InputObserver")
    assert loaded["torch"] is True


def test_the_contract_forbids_the_torch_side_to_every_parent_package():
    import tomllib  # Python 3.11+, like tests/unit/test_packaging.py

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (torch_free,) = [c for c in contracts if c["name"] == "The parent's packages are torch-free"]
    parent = {f"observer_ci.{p}" for p in ("core", "report", "github", "action")}
    assert set(torch_free["source_modules"]) == parent
    assert {"torch", "onnxruntime", "numpy", "observer_ci.pipeline"} <= set(
        torch_free["forbidden_modules"]
    )
