"""The pipeline: run observation scripts, then export, replay and probe each model."""

from __future__ import annotations

import contextlib
import datetime
import gc
import hashlib
import os
import re
import runpy
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from observer_ci import registry
from observer_ci.causes import add_sample_difference, explain_exception, explain_script_error
from observer_ci.constants import DEFAULT_OPSET, FEEDS_MAX_BYTES
from observer_ci.dim_names import name_dims
from observer_ci.environment import environment_fingerprint
from observer_ci.errors import ANSI_ESCAPE, error_tail, traceback_tail
from observer_ci.export import export_observed
from observer_ci.export_cache import DEFAULT_CACHE_MAX_MB, MB, cached_export, export_key
from observer_ci.families import (
    ROLE_DECODER,
    ROLE_DECODER_WITH_PAST,
    ROLE_SINGLE,
    Family,
    name_families,
    plan_families,
    split_family,
    stand_ins,
)
from observer_ci.graph_warnings import graph_warnings
from observer_ci.journal import JournalWriter
from observer_ci.logs import log_group, quiet_third_party
from observer_ci.logs import progress as progress_line
from observer_ci.observer import InputObserver
from observer_ci.probe import run_probe
from observer_ci.pytrees import register_if_imported
from observer_ci.replay import make_session, replay_observation
from observer_ci.results import (
    STATUS_DISCREPANCY,
    STATUS_EXPORT_FAILED,
    STATUS_OBSERVE_FAILED,
    STATUS_OK,
    STATUS_ORT_FAILED,
    STATUS_PROBE_FAILED,
    STATUS_SCRIPT_FAILED,
    ExportResult,
    GraphResult,
    ModelResult,
    ObservationResult,
    ProbeResult,
    RunResults,
    max_or_none,
)
from observer_ci.rules import Thresholds

Progress = Callable[[str], None]


@dataclass
class RunConfig:
    """Tolerances and timing of the checks. The tolerances are the ``abs_max`` and
    ``rel_max`` thresholds: one set decides SUCCESS and the ``discrepancy`` rule."""

    atol: float = Thresholds.abs_max
    rtol: float = Thresholds.rel_max
    hist: tuple[float, ...] = (0.1, 0.01)
    warmup: int = 2
    repeat: int = 10
    probe: bool = True
    cache_dir: str | None = None  # export cache shared by runs (None: no cache)
    cache_max_bytes: int | None = DEFAULT_CACHE_MAX_MB * MB  # its size cap (None: no cap)
    threads: int | None = None  # onnxruntime intra-op threads (None: its default)
    save_feeds: bool = False  # save the onnxruntime inputs for paired base/head timing
    merge_decoders: bool = True  # decoder_model_merged.onnx when a decoder has two families
    feeds_max_bytes: int = FEEDS_MAX_BYTES  # all saved inputs of the run together

    def recorded(self) -> dict[str, object]:
        """What ``results.json`` records under ``settings``."""
        return {
            "abs_max": self.atol,
            "rel_max": self.rtol,
            "hist": list(self.hist),
            "warmup": self.warmup,
            "repeat": self.repeat,
            "probe": self.probe,
        }


def run_scripts(
    scripts: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    config: RunConfig | None = None,
    label: str = "head",
    progress: Progress = progress_line,
    verbose: bool = False,
    journal: str | os.PathLike[str] | None = None,
    reverse_order: bool = False,
) -> RunResults:
    """Runs every script and checks every model it observed. Never raises for bad input.
    Third-party warnings stay quiet unless ``verbose``.

    With ``journal``, each script's rows are appended there as soon as it is done
    (:mod:`observer_ci.journal`), so a process killed mid-way loses only the running one.
    ``reverse_order`` processes the scripts last to first, the results keeping the given
    order: base and head side by side then start on different models, and a model neither
    changed is exported by the first to reach it and restored from the shared cache by the
    other instead of one waiting on the other's export.
    """
    config = config or RunConfig()
    out = Path(out_dir)
    results = RunResults(
        environment=environment_fingerprint(),
        label=label,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        settings=config.recorded(),
    )
    order = [str(s) for s in scripts]
    if reverse_order:
        order.reverse()
    writer = JournalWriter(journal) if journal else None
    if writer:
        writer.begin(results, order)
    by_script: dict[int, list[ModelResult]] = {}
    with quiet_third_party(verbose):
        for position, script in sorted(
            enumerate(str(s) for s in scripts), key=lambda item: order.index(item[1])
        ):
            if writer:
                writer.start(script)
            models = run_script(script, out, config=config, progress=progress)
            by_script[position] = models
            if writer:
                writer.done(script, models)
    results.models = [m for position in sorted(by_script) for m in by_script[position]]
    return results


def run_script(
    script: str, out_dir: Path, *, config: RunConfig, progress: Progress = progress_line
) -> list[ModelResult]:
    """Executes one observation script, then processes what it registered."""
    progress(f"running {script}")
    registry.take_registered()
    failure: ModelResult | None = None
    begin = time.perf_counter()
    try:
        with log_group(f"observer-ci: script {script}"):
            _execute(script)
    except BaseException as e:  # SystemExit and KeyboardInterrupt-like exits of scripts too
        if isinstance(e, KeyboardInterrupt):
            raise
        if not (isinstance(e, SystemExit) and e.code in (0, None)):
            failure = ModelResult(
                name=Path(script).stem,
                script=script,
                status=STATUS_SCRIPT_FAILED,
                error=script_traceback(e, script),
                cause=explain_script_error(e),
            )
            progress(f"{script} raised {type(e).__name__}: {e}")
    script_seconds = time.perf_counter() - begin
    entries = registry.take_registered()
    models = []
    with _heap_frozen():
        for entry in entries:
            with log_group(f"observer-ci: model {entry.name}"):
                models.append(_process_safely(entry, out_dir, config=config, progress=progress))
    for m in models:
        m.phase_seconds["script"] = script_seconds
    if failure is not None:
        models.append(failure)
    elif not models:
        models.append(
            ModelResult(
                name=Path(script).stem,
                script=script,
                status=STATUS_SCRIPT_FAILED,
                error="the script observed no model: wrap calls in "
                "`with observer_ci.observe(model, name=...):`",
            )
        )
    return models


def _process_safely(
    entry: registry.ObservedModel, out_dir: Path, *, config: RunConfig, progress: Progress
) -> ModelResult:
    """``process_model`` whose unexpected errors become a result row (never a crash)."""
    try:
        return process_model(entry, out_dir, config=config, progress=progress)
    except Exception as e:
        progress(f"{entry.name}: cannot be processed: {type(e).__name__}: {e}")
        return ModelResult(
            name=entry.name,
            script=entry.script,
            status=STATUS_OBSERVE_FAILED,
            method_name=entry.method_name,
            error=f"observer-ci could not process this model ({traceback_tail(e, 6)}); "
            "observe it with observer_ci.observe(model, name=...) or report the problem",
        )


def script_traceback(exc: BaseException, script: str, max_frames: int = 12) -> str:
    """The traceback from the script's own frames on (the runner's frames are noise)."""
    frames = traceback.extract_tb(exc.__traceback__)
    target = Path(script).resolve()
    start = next(
        (i for i, f in enumerate(frames) if Path(f.filename).resolve() == target), None
    )
    if start is None:
        return traceback_tail(exc)
    lines = traceback.format_list(frames[start:][-max_frames:])
    lines += traceback.format_exception_only(type(exc), exc)
    return ANSI_ESCAPE.sub("", "Traceback (most recent call last):\n" + "".join(lines)).strip()


_TRAINING_SENSITIVE = (
    torch.nn.modules.dropout._DropoutNd,
    torch.nn.modules.batchnorm._BatchNorm,
)


def _has_training_behaviour(model: object) -> bool:
    """True when a submodule in training mode behaves differently than in eval mode."""
    if not isinstance(model, torch.nn.Module):
        return False
    return any(isinstance(m, _TRAINING_SENSITIVE) and m.training for m in model.modules())


def model_notes(entry: registry.ObservedModel) -> list[str]:
    """Hints a reader needs to interpret the numbers."""
    notes = []
    if _has_training_behaviour(entry.model):
        notes.append(
            "the model was in training mode: dropout and batch norm differ between runs; "
            "call model.eval() in the observation script"
        )
    # The exported signature takes every argument some call passed a tensor for (the
    # calls that did not are fed empty tensors): only the rest is really not exported.
    exported = {name for obs in entry.observer.observations for name in obs.named}
    ignored: dict[str, str] = {}
    for obs in entry.observer.observations:
        for name, why in obs.ignored.items():
            if name not in exported:
                ignored.setdefault(name, why)
    if ignored:
        shown = ", ".join(f"{n} ({why})" for n, why in list(ignored.items())[:8])
        notes.append(f"arguments not exported as inputs (the export uses their defaults): {shown}")
    return notes


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """Leaves what is alive after the script (torch, transformers, the model, its calls) out
    of the garbage collector's passes while its models are exported and replayed: export
    allocates heavily, and each full pass would walk those objects again (measured: 10-20%
    of the CPU of a small model's run). Unfrozen afterwards, so the script's objects can go."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _execute(script: str) -> None:
    path = Path(script)
    if not path.is_file():
        raise FileNotFoundError(f"observation script not found: {script}")
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    sys.argv = [str(path)]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        with registry.current_script(script):
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


# File names stay well under the 255 bytes most file systems allow (".onnx.data" and
# friends are appended to them).
MAX_FILENAME_CHARS = 120


def safe_filename(name: str) -> str:
    """A file name for ``name``: unsafe characters replaced; a long name is cut and
    given a hash of the full name, so two long names sharing a prefix stay apart."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model"
    if len(safe) <= MAX_FILENAME_CHARS:
        return safe
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{safe[: MAX_FILENAME_CHARS - 17]}-{digest}"


def process_model(
    entry: registry.ObservedModel,
    out_dir: Path,
    *,
    config: RunConfig,
    progress: Progress = progress_line,
) -> ModelResult:
    """Infer, export, replay in onnxruntime, probe unseen shapes: one ModelResult."""
    obs = entry.observer
    result = ModelResult(
        name=entry.name,
        script=entry.script,
        status=STATUS_OK,
        method_name=entry.method_name,
        n_observations=obs.num_obs(),
        notes=model_notes(entry),
    )
    phase = _Phases(result)
    register_if_imported()  # ModelOutput classes first used during the script get key paths
    with phase("infer"):
        try:
            result.inputs = obs.input_summaries(entry.set_batch_dimension_for)
            names = name_dims(obs, entry.set_batch_dimension_for)
            for info, named in zip(result.inputs, names):
                info.dim_names = [named[d] for d in info.dynamic_dims]
            result.dynamic_shapes = repr(
                obs.infer_dynamic_shapes(entry.set_batch_dimension_for, named=True)
            )
        except Exception as e:
            result.status, result.error = STATUS_OBSERVE_FAILED, error_tail(e)
            result.cause = explain_exception(e, observer=obs)
            progress(f"{entry.name}: cannot infer export inputs: {result.error}")
            return result
    try:
        families = plan_families(obs, entry.set_batch_dimension_for)
    except Exception as e:
        result.status, result.error = STATUS_OBSERVE_FAILED, error_tail(e)
        result.cause = explain_exception(e, observer=obs)
        return result
    progress(
        f"{entry.name}: exporting {len(families)} graph(s) ({obs.num_obs()} calls observed)"
    )
    server = _FamilyServer(entry, out_dir, config, phase, progress, single=len(families) == 1)
    rows: dict[int, ObservationResult] = {}
    served_families: list[Family] = []
    queue = list(families)
    while queue:
        family = queue.pop(0)
        if not family.name:
            family.name = f"{ROLE_SINGLE}_{len(served_families) + len(queue) + 1}"
        graph, served = server.serve(family)
        moved = _stand_in_failures(graph, served)
        if moved:
            family, *extra = split_family(family, obs, moved, entry.set_batch_dimension_for)
            graph.observation_indices = family.indices
            for i in moved:
                served.pop(i)
            server.single = False
            queue.extend(extra)
        result.graphs.append(graph)
        served_families.append(family)
        rows.update(served)
    if len(result.graphs) > 1:
        server.rename(result.graphs, name_families(served_families), rows)
    result.observations = [rows[i] for i in sorted(rows)]
    for graph in result.graphs:
        served = [rows[i] for i in graph.observation_indices if i in rows]
        if served:
            graph.abs = max_or_none(r.abs for r in served)
            graph.rel = max_or_none(r.rel for r in served)
            graph.success = all(r.success for r in served)
    main = result.graphs[0]
    result.export, result.probe = main.export, main.probe
    for graph in result.graphs:
        if graph.export is not None:
            result.notes.extend(n for n in graph.export.notes if n not in result.notes)
    result.notes.extend(server.notes)
    failed = [g for g in result.graphs if g.export is None or not g.export.ok]
    if failed:
        g = failed[0]
        error = (g.export.error if g.export else None) or "export failed"
        result.status = STATUS_EXPORT_FAILED
        result.error = error if len(result.graphs) == 1 else f"graph {g.name}: {error}"
        result.cause = g.export.cause if g.export else None
        result.warnings = graph_warnings(result)
        progress(f"{entry.name}: export failed: {result.error[-300:]}")
        return result
    merged = server.merge(result.graphs) if config.merge_decoders else None
    if merged is not None:
        result.graphs.append(merged)
        if not merged.success:
            why = merged.reason if merged.export is None else (
                f"did not match torch on every call (max abs {merged.abs:.3g})"
            )
            result.notes.append(f"{merged.name}: {why}; use {ROLE_DECODER} and "
                                f"{ROLE_DECODER_WITH_PAST}")
    result.status = _status(result.observations)
    if result.status != STATUS_OK:
        result.error = next((o.error for o in result.observations if o.error), None)
        result.cause = next((o.cause for o in result.observations if o.cause), None)
        samples = {
            i: g.export.sample_index
            for g in result.graphs
            if g.export is not None
            for i in g.observation_indices
        }
        for o in result.observations:
            sample = samples.get(o.index)
            if o.cause is not None and sample is not None:
                add_sample_difference(o.cause, result.inputs, o.index, sample)
    else:
        probe = next(
            (g.probe for g in result.graphs if g.probe and g.probe.ran and not g.probe.success),
            None,
        )
        if probe is not None:
            result.status, result.error = STATUS_PROBE_FAILED, probe.error
            result.cause = probe.cause
    result.warnings = graph_warnings(result)
    total = sum(v for k, v in result.phase_seconds.items() if k != "script")
    progress(f"{entry.name}: {result.status} ({total:.1f}s)")
    return result


def export_model(
    entry: registry.ObservedModel,
    onnx_path: Path,
    *,
    cache_dir: str | None = None,
    observer: InputObserver | None = None,
    set_batch_dimension_for: Any = None,
    call_numbers: list[int] | None = None,
    cache_max_bytes: int | None = DEFAULT_CACHE_MAX_MB * MB,
) -> ExportResult:
    """The "export this model" step, through the export cache when ``cache_dir`` is set.

    ``observer`` (default: the entry's) and ``set_batch_dimension_for`` (default: the
    entry's) are a call family's when the model needs several graphs; ``call_numbers`` maps
    that family's calls to the model's call numbers.
    """
    obs = entry.observer if observer is None else observer
    flags = entry.set_batch_dimension_for if observer is None else set_batch_dimension_for

    def export() -> ExportResult:
        register_if_imported()  # the script may have imported transformers after observing
        return export_observed(
            entry.model,
            obs,
            onnx_path,
            method_name=entry.method_name,
            set_batch_dimension_for=flags,
            named_dims=True,
            call_numbers=call_numbers,
        )

    def key() -> str:
        return export_cache_key(entry, obs, flags, call_numbers)

    return cached_export(export, key, onnx_path, cache_dir, cache_max_bytes)


def export_cache_key(
    entry: registry.ObservedModel,
    observer: InputObserver | None = None,
    set_batch_dimension_for: Any = None,
    call_numbers: list[int] | None = None,
) -> str:
    """The export cache key of one observed model or one of its call families (see
    :mod:`observer_ci.export_cache`)."""
    if observer is None:
        observer, set_batch_dimension_for = entry.observer, entry.set_batch_dimension_for
    return export_key(
        entry.model,
        observer,
        method_name=entry.method_name,
        set_batch_dimension_for=set_batch_dimension_for,
        opset=DEFAULT_OPSET,
        extra=call_numbers,
    )


def _save_feeds(
    obs: InputObserver, session: object, onnx_path: Path, config: RunConfig
) -> str | None:
    """The onnxruntime inputs of every call a graph serves, for :mod:`observer_ci.paired`,
    within ``config.feeds_max_bytes``; a note when some or all were not saved."""
    from observer_ci.paired import save_feeds_within
    from observer_ci.replay import match_feeds

    onnx_inputs = [i.name for i in session.get_inputs()]  # type: ignore[attr-defined]
    try:
        feeds = [
            match_feeds(onnx_inputs, obs.leaf_names(), obs.infer_arguments(i, flat=True))
            for i in range(obs.num_obs())
        ]
        note = save_feeds_within(feeds, onnx_path, config.feeds_max_bytes)
    except Exception as e:  # paired timing then says why it has no inputs
        note = f"inputs not saved for paired timing: {error_tail(e)}"
    return note


def _stand_in_failures(graph: GraphResult, served: dict[int, ObservationResult]) -> list[int]:
    """Calls that failed on a shared graph only because of stand-ins (others passed)."""
    if graph.export is None or not graph.export.ok:
        return []
    sample = graph.export.sample_index
    failed = [i for i, r in served.items() if r.stand_ins and not r.success and i != sample]
    if failed and any(r.success for r in served.values()):
        return failed
    return []


class _FamilyServer:
    """Exports one graph per call family, replays its calls on it, probes it."""

    def __init__(
        self,
        entry: registry.ObservedModel,
        out_dir: Path,
        config: RunConfig,
        phase: _Phases,
        progress: Progress,
        single: bool,
    ):
        self.entry, self.out_dir, self.config, self.phase = entry, out_dir, config, phase
        self.progress = progress
        self.single = single
        self.method = getattr(entry.model, entry.method_name)
        self.observers: dict[tuple[int, ...], InputObserver] = {}  # family calls -> observer
        self.feeds_saved = False
        self.notes: list[str] = []  # for the model's notes

    def path(self, name: str) -> Path:
        stem = safe_filename(self.entry.name)
        if self.single:
            return self.out_dir / "onnx" / f"{stem}.onnx"
        return self.out_dir / "onnx" / stem / f"{safe_filename(name)}.onnx"

    def rename(
        self,
        graphs: list[GraphResult],
        families: list[Family],
        rows: dict[int, ObservationResult],
    ) -> None:
        """Final names once every family is known; files (and saved feeds) and rows follow."""
        from observer_ci.paired import feeds_path

        self.single = False
        renamed: dict[str, str] = {}
        for graph, family in zip(graphs, families):
            renamed[graph.name] = family.name
            graph.name, graph.reason = family.name, family.reason or graph.reason
        temporary = []
        for graph in graphs:  # two steps: a new name may be another graph's old name
            if graph.export is not None and graph.export.onnx_path:
                source = Path(graph.export.onnx_path)
                moved = source.with_name(source.name + ".moving")
                source.replace(moved)
                feeds = feeds_path(source)
                moved_feeds = feeds.with_name(feeds.name + ".moving")
                if feeds.exists():
                    feeds.replace(moved_feeds)
                temporary.append((graph, moved, moved_feeds))
        for graph, moved, moved_feeds in temporary:
            target = self.path(graph.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            moved.replace(target)
            if moved_feeds.exists():
                moved_feeds.replace(feeds_path(target))
            graph.export.onnx_path = str(target)
        for row in rows.values():
            old = row.family or ""
            row.family = renamed.get(old, row.family)
            if row.note:
                row.note = row.note.replace(f"graph {old} ", f"graph {row.family} ")

    def serve(self, family: Family) -> tuple[GraphResult, dict[int, ObservationResult]]:
        """Exports ``family``'s graph, replays its calls on it and probes it."""
        entry, config, progress = self.entry, self.config, self.progress
        obs = entry.observer
        whole = family.indices == list(range(obs.num_obs()))
        inherit = family.inherit_dynamic
        sub = obs if whole else obs.subset(family.indices, inherit_dynamic=inherit)
        self.observers[tuple(family.indices)] = sub
        flags = _flags_for(sub, entry.set_batch_dimension_for)
        graph = GraphResult(
            name=family.name, observation_indices=family.indices, reason=family.reason
        )
        onnx_path = self.path(family.name)
        with self.phase("export"):
            graph.export = export_model(
                entry,
                onnx_path,
                cache_dir=config.cache_dir,
                observer=None if whole else sub,
                set_batch_dimension_for=flags,
                call_numbers=None if whole else family.indices,
                cache_max_bytes=config.cache_max_bytes,
            )
        if not graph.export.ok:
            return graph, {}  # the graph entry holds the error and the calls it would serve
        shown = entry.name if self.single else f"{entry.name} [{family.name}]"
        progress(f"{shown}: exported in {graph.export.seconds:.1f}s, replaying")
        try:
            session = make_session(onnx_path, threads=config.threads)
        except Exception as e:
            error, cause = error_tail(e), explain_exception(e)
            return graph, {
                i: ObservationResult(
                    index=i, ok=False, family=family.name, error=error, cause=cause
                )
                for i in family.indices
            }
        dynamic = sub.dynamic_dims(flags)
        rows: dict[int, ObservationResult] = {}
        begin = time.perf_counter()
        with self.phase("replay"):
            for local, index in enumerate(family.indices):
                row = replay_observation(
                    sub,
                    local,
                    session,
                    method=self.method,
                    atol=config.atol,
                    rtol=config.rtol,
                    hist=config.hist,
                    warmup=config.warmup,
                    repeat=config.repeat,
                ).result
                row.index, row.family = index, family.name
                row.stand_ins, _made_up = stand_ins(sub, local, dynamic)
                if row.stand_ins:
                    row.note = (
                        f"served by graph {family.name} with 0-length stand-ins for the absent "
                        f"inputs {row.stand_ins[:4]}"
                    )
                rows[index] = row
        progress(
            f"{shown}: replayed {len(family.indices)} calls "
            f"({config.warmup} warm-up + {config.repeat} timed runs each) "
            f"in {time.perf_counter() - begin:.1f}s"
        )
        if config.save_feeds and not self.feeds_saved:  # paired timing uses the main graph
            self.feeds_saved = True
            note = _save_feeds(sub, session, onnx_path, config)
            if note:
                progress(f"{shown}: {note}")
                self.notes.append(note)
        if config.probe:
            with self.phase("probe"):
                try:
                    graph.probe = run_probe(
                        sub,
                        self.method,
                        session,
                        set_batch_dimension_for=flags,
                        atol=config.atol,
                        rtol=config.rtol,
                    )
                except Exception as e:
                    graph.probe = ProbeResult(ran=True, ok=False, error=error_tail(e))
        return graph, rows


    def merge(self, graphs: list[GraphResult]) -> GraphResult | None:
        """``decoder_model_merged``: the two decoder graphs behind one ``If`` with their
        weights stored once, checked on every observed call (``None`` when the families are
        not a decoder and a decoder with past, or one of them failed)."""
        from observer_ci.diff import flatten_outputs, max_diff
        from observer_ci.export import describe_onnx
        from observer_ci.merged import MERGED_NAME, merge_decoders, merged_feeds
        from observer_ci.replay import match_feeds

        by_name = {g.name: g for g in graphs}
        past, first = by_name.get(ROLE_DECODER_WITH_PAST), by_name.get(ROLE_DECODER)
        if past is None or first is None or len(graphs) != 2:
            return None
        if not all(g.export is not None and g.export.ok for g in (past, first)):
            return None
        path = self.path(MERGED_NAME)
        graph = GraphResult(
            name=MERGED_NAME,
            observation_indices=sorted(past.observation_indices + first.observation_indices),
        )
        begin = time.perf_counter()
        with self.phase("merge"):
            try:
                facts = merge_decoders(past.export.onnx_path, first.export.onnx_path, path)
                session = make_session(path, threads=self.config.threads)
                worst = None
                for family, use_cache in ((past, True), (first, False)):
                    indices = family.observation_indices
                    sub = self.observers.get(tuple(indices)) or self.entry.observer.subset(indices)
                    for local in range(sub.num_obs()):
                        flat = sub.infer_arguments(local, flat=True)
                        feeds = match_feeds(family.export.input_names, sub.leaf_names(), flat)
                        got = session.run(
                            None, merged_feeds(session.get_inputs(), feeds, use_cache)
                        )
                        expected = flatten_outputs(sub.observations[local].outputs)
                        diff = max_diff(expected, got)
                        ok = diff.within(self.config.atol, self.config.rtol)
                        graph.abs = max(graph.abs or 0.0, diff.abs)
                        graph.rel = max(graph.rel or 0.0, diff.rel)
                        worst = ok if worst is None else worst and ok
                graph.success = bool(worst)
            except Exception as e:
                graph.reason = f"not merged: {error_tail(e, 300)}"
                graph.success = False
                return graph
        graph.export = describe_onnx(path)
        graph.export.seconds = time.perf_counter() - begin
        graph.reason = (
            f"{ROLE_DECODER} and {ROLE_DECODER_WITH_PAST} behind one If on "
            f"`use_cache_branch`: {facts.shared_initializers} initializers stored once "
            f"({facts.bytes_saved} bytes saved)"
        )
        self.progress(
            f"{self.entry.name} [{MERGED_NAME}]: merged, max abs {graph.abs} over "
            f"{len(graph.observation_indices)} calls"
        )
        return graph


def _flags_for(observer: InputObserver, flags: Any) -> Any:
    """``set_batch_dimension_for`` restricted to the inputs a family's calls pass."""
    if flags is None or isinstance(flags, bool) or isinstance(flags, (str, int)) and not flags:
        return flags
    items = [flags] if isinstance(flags, (str, int)) else list(flags)
    names = observer.leaf_names()
    kept = [
        f
        for f in items
        if not isinstance(f, str) or any(n == f or n.startswith(f + "_") for n in names)
    ]
    return kept or None


def _status(observations: list[ObservationResult]) -> str:
    if any(o.ort_latency_s is None for o in observations):
        return STATUS_ORT_FAILED
    if not all(o.success for o in observations):
        return STATUS_DISCREPANCY
    return STATUS_OK


class _Phases:
    """Context managers timing the phases of one model into ``phase_seconds``."""

    def __init__(self, result: ModelResult):
        self.result = result

    def __call__(self, name: str) -> _Phase:
        return _Phase(self.result, name)


class _Phase:
    def __init__(self, result: ModelResult, name: str):
        self.result, self.name = result, name

    def __enter__(self) -> None:
        self.begin = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        seconds = time.perf_counter() - self.begin
        phases = self.result.phase_seconds
        phases[self.name] = phases.get(self.name, 0.0) + seconds
