"""Command line: ``observer-ci run | compare | merge | action``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from observer_ci.core.constants import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from observer_ci.core.results import RunResults

__all__ = ["EXIT_OK", "EXIT_REGRESSION", "EXIT_USAGE", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="observer-ci",
        description="Observe PyTorch model calls, export to ONNX, check onnxruntime, report.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run observation scripts, write results.json + report.md")
    run.add_argument("scripts", nargs="+", help="observation scripts (globs allowed)")
    run.add_argument("--out", default="observer-ci-out", help="output directory")
    run.add_argument("--label", default="head", help="label stored in results.json")
    run.add_argument("--baseline", help="results.json of the base to compare with")
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
        "discrepancy rule (same as --thresholds rel_max=...; default 1e-2)",
    )
    run.add_argument("--warmup", type=int, default=2, help="untimed runs before timing")
    run.add_argument(
        "--repeat", type=int, default=10, help="timed runs per call (median and spread reported)"
    )
    run.add_argument(
        "--verbose", action="store_true", help="show third-party warnings (torch, exporter)"
    )
    run.add_argument("--no-probe", action="store_true", help="skip the unseen-shape probe")
    run.add_argument(
        "--no-merged-decoder",
        action="store_true",
        help="do not write decoder_model_merged.onnx for decoders with two call families",
    )
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
        "--save-feeds",
        action="store_true",
        help="save the onnxruntime inputs next to each ONNX file (for `pair`)",
    )
    run.add_argument(
        "--reverse-order",
        action="store_true",
        help="process the scripts last to first (results keep the given order): a run side "
        "by side with another one then starts on other models, sharing the export cache",
    )
    run.add_argument(
        "--variants",
        default="",
        help="graphs users deploy, each replayed on every observed call: a comma list of "
        "fp16, int8, optimized, or all (default: none)",
    )
    run.add_argument(
        "--providers",
        default="cpu",
        help="onnxruntime providers to replay on: cpu, cuda, tensorrt, coreml, dml, openvino "
        "or all (default: cpu); one this onnxruntime lacks is a skipped row",
    )
    run.add_argument(
        "--no-gate", action="store_true", help="always exit 0 once results are written"
    )
    run.add_argument(
        "--journal", help="append each script's rows to this JSON-lines file once it is done"
    )

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
    return parser


def _add_gate_options(parser: argparse.ArgumentParser) -> None:
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


class UsageError(Exception):
    """Bad arguments or unreadable files: exit 2 with a clear message."""


def expand_scripts(patterns: Sequence[str]) -> list[str]:
    """Expands globs; a pattern matching nothing is kept so its failure is reported."""
    import glob

    scripts: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        scripts.extend(m for m in (matches or [pattern]) if m not in scripts)
    return scripts


def cmd_run(args: argparse.Namespace) -> int:
    from observer_ci.pipeline.export_cache import resolve_cache_dir, resolve_cache_max_bytes

    variants, providers = _variants(args)

    try:
        cache_max_bytes = resolve_cache_max_bytes(args.cache_max_mb)
    except ValueError as e:
        raise UsageError(f"--cache-max-mb: {e}") from e

    if args.threads:
        import torch

        torch.set_num_threads(max(1, args.threads))
    from observer_ci.pipeline.config import RunConfig
    from observer_ci.pipeline.scripts import run_scripts

    thresholds, fail_on = _gate(args)
    if args.atol is not None:
        thresholds = _with(thresholds, abs_max=args.atol)
    if args.rtol is not None:
        thresholds = _with(thresholds, rel_max=args.rtol)
    base = _read(args.baseline) if args.baseline else None
    config = RunConfig(
        atol=thresholds.abs_max,
        rtol=thresholds.rel_max,
        warmup=args.warmup,
        repeat=args.repeat,
        probe=not args.no_probe,
        merge_decoders=not args.no_merged_decoder,
        cache_dir=str(cache_dir) if (cache_dir := resolve_cache_dir(args.cache_dir)) else None,
        cache_max_bytes=cache_max_bytes,
        threads=args.threads,
        save_feeds=args.save_feeds,
        variants=variants,
        providers=providers,
        variant_tolerances={v: thresholds.variant_limits(v) for v in variants},
    )
    head = run_scripts(
        expand_scripts(args.scripts),
        args.out,
        config=config,
        label=args.label,
        verbose=args.verbose,
        journal=args.journal,
        reverse_order=args.reverse_order,
    )
    code = publish(head, base, Path(args.out), thresholds, fail_on)
    return EXIT_OK if args.no_gate else code


def cmd_compare(args: argparse.Namespace) -> int:
    thresholds, fail_on = _gate(args)
    base, head = _read(args.base), _read(args.head)
    if args.out:
        return publish(head, base, Path(args.out), thresholds, fail_on, write_results=False)
    from observer_ci.report.rules import compare

    regressions = compare(head, base, thresholds, fail_on)
    print_regressions(regressions)
    return EXIT_REGRESSION if any(r.fails_build for r in regressions) else EXIT_OK


def cmd_pair(args: argparse.Namespace) -> int:
    from observer_ci.pipeline.paired import pair_results

    base, head = _read(args.base), _read(args.head)
    timed = pair_results(base, head, rounds=args.rounds, threads=args.threads)
    head.write(args.head)
    print(f"paired timing of {timed} model(s) written to {args.head}")
    return EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    from observer_ci.core.legs import merge_results

    thresholds, fail_on = _gate(args)
    merged = merge_results([_read(p) for p in args.parts])
    base = _read(args.baseline) if args.baseline else None
    return publish(merged, base, Path(args.out), thresholds, fail_on)


def publish(
    head: RunResults,
    base: RunResults | None,
    out: Path,
    thresholds,
    fail_on: set[str],
    *,
    write_results: bool = True,
) -> int:
    """Writes results.json (first) and report.md, prints a summary, returns the gate code."""
    from observer_ci.report.markdown import write_report_files
    from observer_ci.report.rules import compare

    regressions = compare(head, base, thresholds, fail_on)
    write_report_files(
        out, head, regressions, base, write_results=write_results, thresholds=thresholds
    )
    for m in head.models:
        print(f"{m.status:>15}  {m.name}")
    print_regressions(regressions)
    print(f"wrote {out / 'results.json'} and {out / 'report.md'}")
    return EXIT_REGRESSION if any(r.fails_build for r in regressions) else EXIT_OK


def print_regressions(regressions) -> None:
    for r in regressions:
        mark = "FAIL" if r.fails_build else "warn"
        print(f"{mark}  {r.model}: {r.rule}: {r.message}")


def _gate(args: argparse.Namespace):
    from observer_ci.report.rules import parse_fail_on, parse_thresholds

    try:
        return parse_thresholds(args.thresholds), parse_fail_on(args.fail_on)
    except ValueError as e:
        raise UsageError(str(e)) from e


def _variants(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from observer_ci.core.variants import parse_providers, parse_variants

    try:
        return parse_variants(args.variants), parse_providers(args.providers)
    except ValueError as e:
        raise UsageError(str(e)) from e


def _with(thresholds, **values: float):
    import dataclasses

    for key, value in values.items():
        if not value >= 0:
            raise UsageError(f"--{'atol' if key == 'abs_max' else 'rtol'} must be >= 0")
    return dataclasses.replace(thresholds, **values)


def _read(path: str) -> RunResults:
    try:
        return RunResults.read(path)
    except FileNotFoundError as e:
        raise UsageError(f"{path}: no such file") from e
    except ValueError as e:
        raise UsageError(str(e)) from e


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
