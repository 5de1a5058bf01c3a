"""Command line: ``observer-ci run | compare | merge | action | pair | replay | explain``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from observer_ci.core.constants import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from observer_ci.core.exceptions import UsageError
from observer_ci.core.results import RunResults
from observer_ci.core.run_options import MISSING_SCRIPTS, RunOptions, parse_cache_max_mb
from observer_ci.core.script_paths import resolve_scripts

__all__ = ["EXIT_OK", "EXIT_REGRESSION", "EXIT_USAGE", "main"]

DEFAULTS = RunOptions()  # the run's defaults (one home: the fields of RunOptions)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="observer-ci",
        description="Observe PyTorch model calls, export to ONNX, check onnxruntime, report.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub.add_parser("run", help="run observation scripts, write results.json + report.md"))

    compare = sub.add_parser("compare", help="compare two results.json files")
    compare.add_argument("base")
    compare.add_argument("head")
    compare.add_argument("--out", help="directory for report.md (default: print only)")
    _add_gate_options(compare)

    merge = sub.add_parser("merge", help="combine results.json files of matrix jobs")
    merge.add_argument("parts", nargs="+")
    merge.add_argument("--out", required=True)
    merge.add_argument("--baseline", help="results.json of the base to compare with")
    _add_gate_options(merge)

    action = sub.add_parser("action", help="the GitHub Action (settings from INPUT_* env)")
    action.add_argument("--dry-run", action="store_true", help="write everything, post nothing")

    pair = sub.add_parser(
        "pair", help="time base and head ONNX graphs interleaved; fills head's paired_latency"
    )
    pair.add_argument("base", help="results.json of the base run")
    pair.add_argument("head", help="results.json of the head run (--save-feeds), updated")
    pair.add_argument("--rounds", type=int, default=10, help="alternations per call")
    pair.add_argument("--threads", type=int, help="onnxruntime intra-op threads")
    replay = sub.add_parser(
        "replay", help="rerun onnxruntime on a reproducer bundle (OUT/bundles/MODEL/GRAPH)"
    )
    replay.add_argument("bundle", help="a bundle folder (holding bundle.json)")
    replay.add_argument(
        "--provider", default="cpu", help="onnxruntime provider: cpu, cuda, tensorrt, ..."
    )
    replay.add_argument(
        "--json", action="store_true", help="print the rows as JSON (exact floats), not lines"
    )
    explain = sub.add_parser(
        "explain", help="print why a model of a results.json disagrees (cause, diagnosis)"
    )
    explain.add_argument("results", help="a results.json file")
    explain.add_argument("model", help="the model's name")
    return parser


def _add_run(run: argparse.ArgumentParser) -> None:
    """The options of ``run``: each is a field of :class:`RunOptions` (its defaults)."""
    run.add_argument("scripts", nargs="*", help="observation scripts (globs allowed)")
    run.add_argument(
        "--config",
        metavar="FILE",
        help="every option of the run as a JSON file (RunOptions; the action writes it); "
        "not combined with scripts or other options",
    )
    run.add_argument("--out", default=DEFAULTS.out, help="output directory")
    run.add_argument("--label", default=DEFAULTS.label, help="label stored in results.json")
    run.add_argument(
        "--baseline",
        help="results.json of the base to compare with, or history:DIR (earlier runs' "
        "results.json files under DIR: a latency band and a trend)",
    )
    run.add_argument(
        "--history-runs",
        type=int,
        default=DEFAULTS.history_runs,
        help="with --baseline history:DIR, the number of most recent runs used",
    )
    run.add_argument(
        "--bundles",
        choices=("failing", "all", "none"),
        default=DEFAULTS.bundles,
        help="reproducer bundles under OUT/bundles/: for graphs with a failing call (default), "
        "for every graph, or none",
    )
    _add_gate_options(run)
    run.add_argument(
        "--atol",
        type=float,
        help="absolute tolerance: a call succeeds within it, and the discrepancy rule "
        "trips beyond it (same as --thresholds abs_max=...; default 1e-3)",
    )
    run.add_argument(
        "--rtol",
        type=float,
        help="relative tolerance |torch - ort| / (|torch| + 1e-3), for SUCCESS and the "
        "discrepancy rule (same as --thresholds rel_max=...; default 1e-1)",
    )
    run.add_argument(
        "--warmup", type=int, default=DEFAULTS.warmup, help="untimed runs before timing"
    )
    run.add_argument(
        "--repeat",
        type=int,
        default=DEFAULTS.repeat,
        help="timed runs per call (median and spread reported)",
    )
    _add_run_switches(run)
    run.add_argument(
        "--cache-dir",
        help="export cache directory, shared by runs (default: $OBSERVER_CI_CACHE_DIR, else none)",
    )
    run.add_argument(
        "--cache-max-mb",
        help="size cap of the export cache in MB, least recently used entries evicted first "
        "(default: $OBSERVER_CI_CACHE_MAX_MB, else 2048; 0: no cap)",
    )
    run.add_argument(
        "--threads", type=int, help="thread budget of torch and onnxruntime (default: theirs)"
    )
    run.add_argument(
        "--journal", help="append each script's rows to this JSON-lines file once it is done"
    )
    run.add_argument(
        "--variants",
        default=DEFAULTS.variants,
        help="graphs users deploy, each replayed on every observed call: a comma list of "
        "fp16, int8, optimized, or all (default: none)",
    )
    run.add_argument(
        "--missing-scripts",
        choices=MISSING_SCRIPTS,
        default=DEFAULTS.missing_scripts,
        help="a script path or glob naming no readable file: exit 2 before anything runs "
        "(error, the default) or a script_failed row (row)",
    )
    run.add_argument(
        "--providers",
        default=DEFAULTS.providers,
        help="onnxruntime providers to replay on: cpu, cuda, tensorrt, coreml, dml, openvino "
        "or all (default: cpu); one this onnxruntime lacks is a skipped row",
    )


def _add_run_switches(run: argparse.ArgumentParser) -> None:
    """The on/off options of ``run``."""
    switches = {
        "--verbose": "show third-party warnings (torch, exporter)",
        "--no-probe": "skip the unseen-shape probe",
        "--no-merged-decoder": "do not write decoder_model_merged.onnx for decoders with two "
        "call families",
        "--save-feeds": "save the onnxruntime inputs next to each ONNX file (for `pair`)",
        "--reverse-order": "process the scripts last to first (results keep the given order): "
        "a run side by side with another one then starts on other models, sharing the "
        "export cache",
        "--no-gate": "always exit 0 once results are written",
        "--no-summary": "print no status lines and no list of the files written",
    }
    for flag, text in switches.items():
        run.add_argument(flag, action="store_true", help=text)


def _add_gate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        help="policy file: per-model tolerances, fail_on, accepted regressions "
        "(default: .observer-ci.yml in the current directory when present)",
    )
    parser.add_argument(
        "--thresholds", default="", help="e.g. 'abs_max=1e-3,latency_ratio_max=1.5'"
    )
    parser.add_argument(
        "--fail-on", default="default", help="rules failing the build: list, all, none, default"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "compare":
            return cmd_compare(args)
        if args.command == "merge":
            return cmd_merge(args)
        if args.command == "pair":
            return cmd_pair(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "explain":
            return cmd_explain(args)
        from observer_ci.action.main import main as action_main

        return action_main(dry_run=args.dry_run)
    except UsageError as e:
        print(f"observer-ci: error: {e}", file=sys.stderr)
        return EXIT_USAGE


def command() -> int:
    """The process entry point (``observer-ci``, ``python -m observer_ci``): :func:`main`,
    then the heap frozen, so the exit skips the collector's pass over every object (torch,
    onnxscript's registry, the models: about 0.6 s of CPU after a run)."""
    import gc

    code = main()
    gc.freeze()
    return code


def expand_scripts(patterns: Sequence[str]) -> list[str]:
    """Expands globs; a pattern matching nothing is kept so its failure is reported."""
    return resolve_scripts(patterns, strict=False)


def run_options(args: argparse.Namespace) -> RunOptions:
    """The run's options: the ``--config`` file, else the flags (one object either way)."""
    try:
        flags = _options_from_flags(args)
        if not args.config:
            if not flags.scripts:
                raise UsageError("run: give observation scripts (or --config FILE)")
            return flags
        if flags != DEFAULTS:
            raise UsageError("--config holds the whole run: give no scripts or other options")
        return RunOptions.read(args.config)
    except OSError as e:
        raise UsageError(f"--config: {args.config} could not be read: {e}") from e
    except ValueError as e:
        raise UsageError(str(e)) from e


def _options_from_flags(args: argparse.Namespace) -> RunOptions:
    try:
        cache_max_mb = parse_cache_max_mb(args.cache_max_mb) if args.cache_max_mb else None
    except ValueError as e:
        raise UsageError(f"--cache-max-mb {e}") from e
    return RunOptions(
        scripts=tuple(args.scripts),
        out=args.out,
        label=args.label,
        baseline=args.baseline,
        thresholds=args.thresholds,
        fail_on=args.fail_on,
        atol=args.atol,
        rtol=args.rtol,
        warmup=args.warmup,
        repeat=args.repeat,
        verbose=args.verbose,
        probe=not args.no_probe,
        merge_decoders=not args.no_merged_decoder,
        cache_dir=args.cache_dir or None,
        cache_max_mb=cache_max_mb,
        threads=args.threads,
        save_feeds=args.save_feeds,
        reverse_order=args.reverse_order,
        gate=not args.no_gate,
        journal=args.journal,
        policy=args.policy,
        bundles=args.bundles,
        history_runs=args.history_runs,
        variants=args.variants,
        providers=args.providers,
        missing_scripts=args.missing_scripts,
        print_summary=not args.no_summary,
    )


def cmd_run(args: argparse.Namespace) -> int:
    options = run_options(args)
    thresholds, fail_on, policy = _gate(options.thresholds, options.fail_on, options.policy)
    tolerances = {"abs_max": options.atol, "rel_max": options.rtol}
    thresholds = dataclasses.replace(
        thresholds, **{k: v for k, v in tolerances.items() if v is not None}
    )
    from observer_ci.pipeline.config import RunConfig

    try:
        config = RunConfig.from_options(
            options, thresholds, tuple(policy.tolerances()), policy=policy
        )
    except ValueError as e:
        raise UsageError(str(e)) from e
    # every path resolved before anything runs: a mistake exits 2 (ScriptPathError)
    scripts = resolve_scripts(options.scripts, strict=options.missing_scripts == "error")
    base, history = _baseline(options.baseline, options.history_runs)
    if options.threads:
        import torch

        torch.set_num_threads(max(1, options.threads))
    from observer_ci.pipeline.scripts import run_scripts

    head = run_scripts(
        scripts,
        options.out,
        config=config,
        label=options.label,
        verbose=options.verbose,
        journal=options.journal,
        reverse_order=options.reverse_order,
    )
    code = publish(
        head,
        base,
        Path(options.out),
        thresholds,
        fail_on,
        policy,
        history=history,
        quiet=not options.print_summary,
    )
    return code if options.gate else EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    thresholds, fail_on, policy = _gate(args.thresholds, args.fail_on, args.policy)
    base, head = _read(args.base), _read(args.head)
    if args.out:
        return publish(head, base, Path(args.out), thresholds, fail_on, policy, write_results=False)
    from observer_ci.report.rules import compare

    regressions = compare(head, base, thresholds, fail_on, policy)
    print_regressions(regressions)
    return EXIT_REGRESSION if any(r.fails_build for r in regressions) else EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    """Prints each call's discrepancy now and as recorded; exit 1 when one is over the
    bundle's tolerances, 2 when the bundle cannot be read."""

    from observer_ci.pipeline.bundle import replay_bundle

    try:
        rows = replay_bundle(args.bundle, args.provider)
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"{args.bundle}: {e}") from e
    failing = sum(not row["within"] for row in rows)
    if args.json:
        import json

        print(json.dumps(rows, indent=2))
        return EXIT_REGRESSION if failing else EXIT_OK
    for row in rows:
        over = not row["within"]
        recorded = row["recorded_abs"]
        print(
            f"call {row['call']}: max abs {row['abs']:.6g}, max rel {row['rel']:.6g}"
            + (f" (recorded: abs {recorded:.6g})" if recorded is not None else "")
            + ("; " + "; ".join(row["errors"]) if row["errors"] else "")
            + (" OVER TOLERANCE" if over else "")
        )
    return EXIT_REGRESSION if failing else EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    """Prints a model's status, cause and diagnosis; exit 2 for an unknown model."""
    from observer_ci.core.errors import ANSI_ESCAPE
    from observer_ci.report.markdown import diagnosis_facts

    models = _read(args.results).by_name()
    model = models.get(args.model)
    if model is None:
        known = ", ".join(sorted(models)[:20]) or "none"
        raise UsageError(f"{args.results}: no model {args.model!r} (models: {known})")
    lines = [f"{model.name}: {model.status}" + (f" ({model.script})" if model.script else "")]
    if model.cause is not None:
        lines.append(f"cause ({model.cause.kind}): {model.cause.summary}")
        if model.cause.user_frame:
            lines.append(f"your code: {model.cause.user_frame}")
        if model.cause.next_step:
            lines.append(f"next step: {model.cause.next_step}")
    found = [("", model.diagnosis)] + [(f" of graph {g.name}", g.diagnosis) for g in model.graphs]
    diagnosed = [(where, d) for where, d in found if d is not None]
    for where, diagnosis in diagnosed:
        took = f" ({diagnosis.seconds:.3g} s)" if diagnosis.seconds is not None else ""
        lines.append(f"diagnosis{where}{took}:")
        lines += [f"  - {fact}" for fact in diagnosis_facts(diagnosis)]
    if not diagnosed:
        lines.append("no diagnosis: it is made only for a model over its tolerance")
    for line in lines:  # untrusted text: no terminal escapes
        print(ANSI_ESCAPE.sub("", line))
    return EXIT_OK


def cmd_pair(args: argparse.Namespace) -> int:
    from observer_ci.pipeline.paired import pair_results

    base, head = _read(args.base), _read(args.head)
    timed = pair_results(base, head, rounds=args.rounds, threads=args.threads)
    head.write(args.head)
    print(f"paired timing of {timed} model(s) written to {args.head}")
    return EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    from observer_ci.core.legs import merge_results

    thresholds, fail_on, policy = _gate(args.thresholds, args.fail_on, args.policy)
    merged = merge_results([_read(p) for p in args.parts])
    base = _read(args.baseline) if args.baseline else None
    return publish(merged, base, Path(args.out), thresholds, fail_on, policy)


def publish(
    head: RunResults,
    base: RunResults | None,
    out: Path,
    thresholds,
    fail_on: set[str],
    policy=None,
    *,
    write_results: bool = True,
    history=None,
    quiet: bool = False,
) -> int:
    """Writes results.json (first, unless ``write_results`` is False) and report.md, prints a
    summary (not when ``quiet``) naming what it wrote, returns the gate code."""
    from observer_ci.report.markdown import report_files, write_report_files
    from observer_ci.report.rules import compare

    bands = history.bands if history is not None else None
    regressions = compare(head, base, thresholds, fail_on, policy, bands)
    trend = ""
    if history is not None:
        from observer_ci.report.history import trend_section

        trend = trend_section(history, head)
    write_report_files(
        out,
        head,
        regressions,
        base,
        write_results=write_results,
        thresholds=thresholds,
        policy_lines=policy.effective([m.name for m in head.models], thresholds) if policy else [],
        trend=trend,
    )
    code = EXIT_REGRESSION if any(r.fails_build for r in regressions) else EXIT_OK
    if quiet:
        return code
    for m in head.models:
        print(f"{m.status:>15}  {m.name}")
    print_regressions(regressions)
    print(f"wrote {report_files(out, base, write_results=write_results)}")
    return code


def print_regressions(regressions) -> None:
    for r in regressions:
        mark = "FAIL" if r.fails_build else "warn"
        print(f"{mark}  {r.model}: {r.rule}: {r.message}")


def _gate(thresholds: str, fail_on: str, policy_path: str | None = None):
    """The run's thresholds, fail_on and policy: the flags over the policy file's defaults."""
    from observer_ci.report.policy import find_policy

    try:
        policy = find_policy(policy_path)
        return policy.base_thresholds(thresholds), policy.base_fail_on(fail_on), policy
    except ValueError as e:  # a PolicyError names the file and the line
        raise UsageError(str(e)) from e


def _baseline(spec: str | None, runs: int):
    """The base run and, for ``history:DIR``, the history it is the newest run of."""
    if not spec:
        return None, None
    from observer_ci.core.logs import logger
    from observer_ci.core.runner import this_runner
    from observer_ci.report.history import is_history, read_history

    if not is_history(spec):
        return _read(spec), None
    try:
        history = read_history(spec, last=runs, runner=this_runner())
    except ValueError as e:
        raise UsageError(f"--baseline: {e}") from e
    for note in history.notes:
        logger.warning("%s", note)
    return history.latest, history


def _read(path: str) -> RunResults:
    try:
        return RunResults.read(path)
    except FileNotFoundError as e:
        raise UsageError(f"{path}: no such file") from e
    except ValueError as e:
        raise UsageError(str(e)) from e


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
