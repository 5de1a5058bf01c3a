"""Mutation testing of the core modules with mutmut, one module at a time, with a time budget.

Not part of CI (minutes per module). ``make mutation`` runs every module; pass module names
to run some (``python tools/mutation.py diff rules``). Each module runs in its own copy of the
project under ``build/mutation/<module>`` (mutmut's ``mutants/`` directory lives there), with
only that module mutated and only its fast tests selected, so a run never touches the work
tree. When the budget runs out the run is stopped and the score covers the mutants checked so
far (a sample, printed as such). Survivors are written to ``build/mutation/<module>.survivors``;
``mutmut show <name>`` inside the module's copy prints one as a diff.

The score is killed / checked, where timeouts count as killed (the mutant hung the tests) and
mutants no selected test reaches count as survivors.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "mutation"
TARGET_SCORE = 0.85


@dataclass(frozen=True)
class Module:
    """One mutation target: the file, which of its functions (mutmut globs), which tests."""

    source: str
    mutants: tuple[str, ...]
    tests: tuple[str, ...]


MODULES: dict[str, Module] = {
    "diff": Module(
        "observer_ci/pipeline/diff.py",
        ("observer_ci.pipeline.diff.*",),
        ("tests/unit/pipeline/test_diff.py", "tests/unit/pipeline/test_diff_properties.py"),
    ),
    "rules": Module(
        "observer_ci/report/rules.py",
        ("observer_ci.report.rules.*",),
        ("tests/unit/report/test_baseline.py", "tests/unit/report/test_rules_boundaries.py"),
    ),
    "escape": Module(
        "observer_ci/report/escape.py",
        ("observer_ci.report.escape.*",),
        ("tests/unit/report/test_escape.py", "tests/unit/report/test_report.py"),
    ),
    "report_fitting": Module(
        "observer_ci/report/markdown.py",
        (
            "observer_ci.report.markdown.x_render_report*",
            "observer_ci.report.markdown.x_fit_report*",
            "observer_ci.report.markdown.x_report_levels*",
            "observer_ci.report.markdown.x__level_texts*",
            "observer_ci.report.markdown.x__hard_cut*",
        ),
        ("tests/unit/report/test_report.py", "tests/unit/report/test_report_fitting.py"),
    ),
    "sticky_selection": Module(
        "observer_ci/github/sticky.py",
        ("observer_ci.github.sticky.*",),
        (
            "tests/unit/github/test_github_pure.py",
            "tests/unit/github/test_sticky_selection.py",
            "tests/integration/test_github_client.py",
            "tests/integration/test_client_faults.py",
            "tests/integration/test_post_report.py",
        ),
    ),
    "client_retry": Module(
        "observer_ci/github/client.py",
        ("observer_ci.github.client.*",),
        (
            "tests/unit/github/test_github_pure.py",
            "tests/integration/test_github_client.py",
            "tests/integration/test_client_faults.py",
        ),
    ),
    "observer": Module(
        "observer_ci/observing/observer.py",
        ("observer_ci.observing.observer.*",),
        (
            "tests/unit/observing/test_observer.py",
            "tests/unit/observing/test_observer_sample_choice.py",
        ),
    ),
    # the inference itself (alignment, dynamic dims, fill-ins, candidate ranking) lives here
    # since the observer was split; observer.py is the facade
    "observer_inference": Module(
        "observer_ci/observing/alignment.py",
        ("observer_ci.observing.alignment.*",),
        (
            "tests/unit/observing/test_observer.py",
            "tests/unit/observing/test_observer_sample_choice.py",
            "tests/unit/observing/test_observer_parity.py",
            "tests/unit/observing/test_alignment_messages.py",
        ),
    ),
}

# mutmut's exit codes (mutmut/stats.py), folded into what the score needs.
_KILLED = {1, 3, 24, -24, 36, 152, 255}  # failed test, internal pytest error, timeouts
_NOT_REACHED = {5, 33}  # no selected test calls the function
_NOT_CHECKED = {None, 2}  # not run yet (budget) or interrupted


@dataclass
class Score:
    module: str
    killed: int
    survived: list[str]
    not_checked: int
    total: int
    seconds: float

    @property
    def checked(self) -> int:
        return self.killed + len(self.survived)

    @property
    def ratio(self) -> float:
        return self.killed / self.checked if self.checked else 0.0

    def line(self) -> str:
        sample = f", SAMPLE: {self.not_checked} not checked (budget)" if self.not_checked else ""
        flag = "ok " if self.ratio >= TARGET_SCORE else "LOW"
        return (
            f"{flag} {self.module:<17} {100 * self.ratio:5.1f}% killed "
            f"({self.killed}/{self.checked}, {len(self.survived)} survived{sample}; "
            f"{self.seconds:.0f}s)"
        )


def _copy_project(dest: Path, module: Module) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.onnx")
    shutil.copytree(ROOT / "observer_ci", dest / "observer_ci", ignore=ignore)
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=ignore)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    pyproject = re.sub(r"\n\[tool\.mutmut\][^\[]*", "\n", pyproject)
    tests = [t for t in module.tests if (ROOT / t).exists()]
    pyproject += (
        "\n[tool.mutmut]\n"
        'source_paths = ["observer_ci"]\n'
        f"only_mutate = [{json.dumps(module.source)}]\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:xdist", "-q", '
        '"--hypothesis-profile=mutation"]\n'
        'process_isolation = "forkserver"\n'
        "use_git_change_detection = false\n"
        "timeout_multiplier = 5.0\n"
    )
    (dest / "pyproject.toml").write_text(pyproject, encoding="utf-8")


def _run_mutmut(workdir: Path, module: Module, budget_s: float, children: int) -> None:
    # mutmut puts mutants/ first on sys.path itself; a PYTHONPATH entry for it would be
    # cached as missing at start-up and let the installed package shadow the mutated copy
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)]
    cmd += list(module.mutants)
    log = (workdir / "mutmut.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)  # mutmut saves results per mutant as it goes
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    finally:
        log.close()


def _score(name: str, workdir: Path, module: Module, seconds: float) -> Score:
    meta = workdir / "mutants" / (module.source + ".meta")
    codes: dict[str, int | None] = {}
    if meta.exists():
        codes = json.loads(meta.read_text(encoding="utf-8")).get("exit_code_by_key", {})
    selected = {k: v for k, v in codes.items() if any(fnmatch(k, g) for g in module.mutants)}
    killed = sum(1 for v in selected.values() if v in _KILLED)
    survived = sorted(k for k, v in selected.items() if v not in _KILLED and v not in _NOT_CHECKED)
    not_checked = sum(1 for v in selected.values() if v in _NOT_CHECKED)
    return Score(name, killed, survived, not_checked, len(selected), seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"some of: {', '.join(MODULES)}")
    parser.add_argument(
        "--budget",
        type=float,
        default=float(os.environ.get("MUTATION_BUDGET_S", 600)),
        help="seconds per module before the run is stopped and sampled (default 600)",
    )
    parser.add_argument("--children", type=int, default=int(os.environ.get("MUTATION_JOBS", 2)))
    args = parser.parse_args(argv)
    names = args.modules or list(MODULES)
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {', '.join(MODULES)}")
    scores = []
    for name in names:
        module = MODULES[name]
        workdir = BUILD / name
        _copy_project(workdir, module)
        begin = time.monotonic()
        _run_mutmut(workdir, module, args.budget, args.children)
        score = _score(name, workdir, module, time.monotonic() - begin)
        (BUILD / f"{name}.survivors").write_text("".join(f"{s}\n" for s in score.survived))
        print(score.line(), flush=True)
        scores.append(score)
    print("\nmutation score per module (target >= 85% killed):")
    for score in scores:
        print("  " + score.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
