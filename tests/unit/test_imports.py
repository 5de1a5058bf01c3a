"""The torch-free side of the process boundary stays torch-free (and pandas-free).

Each check runs in a fresh interpreter: the modules the action's parent process, ``compare``,
``merge`` and the rules need must not pull in torch, pandas or transformers.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "pandas", "transformers", "onnxruntime")


def loaded_after(code: str) -> dict[str, bool]:
    report = f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    probe = f"import sys\n{code}\nimport json\n{report}"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import observer_ci",
        "import observer_ci.action.main",
        "import observer_ci.cli",
        "import observer_ci.report.rules, observer_ci.core.legs, observer_ci.action.settings",
        "import observer_ci.github.sticky, observer_ci.core.workflow_commands",
        "import observer_ci.action.workspace",
        "import observer_ci.pipeline.causes, observer_ci.core.dim_names",
        "import observer_ci.pipeline.graph_warnings",
        # cache store, `pair` child
        "import observer_ci.pipeline.export_cache, observer_ci.pipeline.paired",
        "import observer_ci.report.variants, observer_ci.core.variants",
    ],
)
def test_torch_free_modules_import_nothing_heavy(code):
    loaded = loaded_after(code)
    assert not any(loaded.values()), f"{code!r} imported {[m for m, v in loaded.items() if v]}"


def test_report_rendering_does_not_import_torch():
    assert loaded_after("import observer_ci.report.markdown")["torch"] is False


def test_the_observer_is_still_reachable_from_the_package():
    loaded = loaded_after("import observer_ci\nobserver_ci.InputObserver")
    assert loaded["torch"] is True
