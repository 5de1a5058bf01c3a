"""One graph per call family: export (through the cache), replay, probe, merge."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import Any

from observer_ci.core.cache_inputs import is_media_input
from observer_ci.core.constants import BUNDLES_ARTIFACT, DEFAULT_OPSET
from observer_ci.core.errors import error_tail
from observer_ci.core.exceptions import MergeError
from observer_ci.core.results import (
    Diagnosis,
    ExportResult,
    Footprint,
    GraphResult,
    ObservationResult,
    ProbeResult,
)
from observer_ci.observing import registry
from observer_ci.observing.families import (
    ROLE_DECODER,
    ROLE_DECODER_WITH_PAST,
    Family,
    stand_ins,
)
from observer_ci.observing.observer import InputObserver
from observer_ci.observing.pytrees import register_if_imported
from observer_ci.pipeline.bundle import BUNDLE_MAX_BYTES
from observer_ci.pipeline.causes import (
    explain_exception,
    explain_missing_kernel,
)
from observer_ci.pipeline.config import Progress, RunConfig
from observer_ci.pipeline.diagnosis import (
    SessionStep,
    diagnose_graph,
    failing_calls,
    session_step,
)
from observer_ci.pipeline.export_cache import DEFAULT_CACHE_MAX_MB, MB, cached_export, export_key
from observer_ci.pipeline.memory import (
    PhaseMemory,
    graph_footprint,
    measure,
    warm_up_exporter,
    warm_up_onnxruntime,
)
from observer_ci.pipeline.phases import Phases
from observer_ci.pipeline.precision import low_precision_dtype
from observer_ci.pipeline.probe import run_probe
from observer_ci.pipeline.replay import make_session, replay_observation
from observer_ci.pipeline.variants import serve_variants, wanted
from observer_ci.report.tables import plural

# File names stay well under the 255 bytes most file systems allow (".onnx.data" and
# friends are appended to them).
MAX_FILENAME_CHARS = 120


def external_data_files(onnx_path: Path) -> list[Path]:
    """The files beside ``onnx_path`` holding its external weights (``<graph>.onnx.data``
    as torch saves them; the graph names them relative to its folder)."""
    stem = onnx_path.name.removesuffix(".moving")
    return sorted(p for p in onnx_path.parent.glob(stem + ".data*") if p.is_file())


def safe_filename(name: str) -> str:
    """A file name for ``name``: unsafe characters replaced; a long name is cut and
    given a hash of the full name, so two long names sharing a prefix stay apart."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model"
    if len(safe) <= MAX_FILENAME_CHARS:
        return safe
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{safe[: MAX_FILENAME_CHARS - 17]}-{digest}"


def export_model(
    entry: registry.ObservedModel,
    onnx_path: Path,
    *,
    cache_dir: str | None = None,
    observer: InputObserver | None = None,
    set_batch_dimension_for: Any = None,
    call_numbers: list[int] | None = None,
    cache_max_bytes: int | None = DEFAULT_CACHE_MAX_MB * MB,
    measured: list[PhaseMemory] | None = None,
) -> ExportResult:
    """The "export this model" step, through the export cache when ``cache_dir`` is set.

    ``observer`` (default: the entry's) and ``set_batch_dimension_for`` (default: the
    entry's) are a call family's when the model needs several graphs; ``call_numbers`` maps
    that family's calls to the model's call numbers. The export's memory, when it runs (not
    on a cache hit), is appended to ``measured``.
    """
    obs = entry.observer if observer is None else observer
    flags = entry.set_batch_dimension_for if observer is None else set_batch_dimension_for

    def export() -> ExportResult:
        # onnx, onnxscript and the exporter load only when an export runs: a cache hit
        # needs none of them (their import is most of a small hit's time)
        from observer_ci.pipeline.export import export_observed

        register_if_imported()  # the script may have imported transformers after observing
        warm_up_exporter(DEFAULT_OPSET)  # its once-per-process costs, outside the figures
        with measure() as figures:
            result = export_observed(
                entry.model,
                obs,
                onnx_path,
                method_name=entry.method_name,
                set_batch_dimension_for=flags,
                named_dims=True,
                call_numbers=call_numbers,
            )
        if measured is not None:
            measured.append(figures)
        return result

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
    :mod:`observer_ci.pipeline.export_cache`)."""
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
    """The onnxruntime inputs of every call a graph serves, for :mod:`observer_ci.pipeline.paired`,
    within ``config.feeds_max_bytes``; a note when some or all were not saved."""
    from observer_ci.pipeline.paired import save_feeds_within
    from observer_ci.pipeline.replay import match_feeds

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


def measure_first_run(sub: InputObserver, session: Any, footprint: Footprint) -> None:
    """The session's first run, measured into ``footprint``: on the call with the most
    input bytes (onnxruntime's arena grows to its largest run), before the replays, which
    reuse what it allocated. A call that cannot run leaves no figure (its row says why)."""
    from observer_ci.pipeline.replay import match_feeds

    try:
        sizes = [
            sum(t.numel() * t.element_size() for t in sub.infer_arguments(i, flat=True))
            for i in range(sub.num_obs())
        ]
        largest = max(range(len(sizes)), key=sizes.__getitem__)
        names = [i.name for i in session.get_inputs()]
        feeds = match_feeds(names, sub.leaf_names(), sub.infer_arguments(largest, flat=True))
        with measure() as run:
            session.run(None, feeds)
    except Exception:
        return
    footprint.run_bytes, footprint.run_peak = run.growth, run.peak


def stand_in_failures(graph: GraphResult, served: dict[int, ObservationResult]) -> list[int]:
    """Calls that failed on a shared graph only because of stand-ins (others passed)."""
    if graph.export is None or not graph.export.ok:
        return []
    sample = graph.export.sample_index
    failed = [i for i, r in served.items() if r.stand_ins and not r.success and i != sample]
    if failed and any(r.success for r in served.values()):
        return failed
    return []


class FamilyServer:
    """Exports one graph per call family, replays its calls on it, probes it."""

    def __init__(
        self,
        entry: registry.ObservedModel,
        out_dir: Path,
        config: RunConfig,
        phase: Phases,
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
        self.bundle_budget = BUNDLE_MAX_BYTES  # what the model's reproducers may still take
        self.probe_call: tuple[Any, ...] | None = None  # (args, kwargs, feeds) the probe failed on

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
        from observer_ci.pipeline.paired import feeds_path

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
                temporary.append((graph, moved, moved_feeds, external_data_files(moved)))
        for graph, moved, moved_feeds, data_files in temporary:
            target = self.path(graph.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            moved.replace(target)
            for data in data_files:  # the graph names them relative to its folder
                if data.parent != target.parent:
                    data.replace(target.parent / data.name)
            if moved_feeds.exists():
                moved_feeds.replace(feeds_path(target))
            graph.export.onnx_path = str(target)
        self._rename_bundles(renamed)
        for row in rows.values():
            old = row.family or ""
            row.family = renamed.get(old, row.family)
            if row.note:
                row.note = row.note.replace(f"graph {old} ", f"graph {row.family} ")

    def _rename_bundles(self, renamed: dict[str, str]) -> None:
        """Reproducer folders follow their graphs' final names (two steps, like the files)."""
        import json

        from observer_ci.pipeline.bundle import BUNDLE_FILE

        root = self.out_dir / "bundles" / safe_filename(self.entry.name)
        staged = []
        for old, new in renamed.items():
            source = root / safe_filename(old)
            if old != new and source.is_dir():
                moving = source.with_name(source.name + ".moving")
                source.replace(moving)
                staged.append((moving, old, new))
        for moving, old, new in staged:
            target = root / safe_filename(new)
            moving.replace(target)
            facts = json.loads((target / BUNDLE_FILE).read_text(encoding="utf-8"))
            facts["graph"] = new
            (target / BUNDLE_FILE).write_text(json.dumps(facts, indent=2), encoding="utf-8")
            before, after = f"/{safe_filename(old)}", f"/{safe_filename(new)}"
            self.notes = [
                n.replace(before + " ", after + " ").replace(before + "`", after + "`")
                if n.startswith("reproducer:")
                else n
                for n in self.notes
            ]

    def serve(self, family: Family) -> tuple[GraphResult, dict[int, ObservationResult]]:
        """Exports ``family``'s graph, replays its calls on it and probes it."""
        graph = GraphResult(
            name=family.name, observation_indices=family.indices, reason=family.reason
        )
        onnx_path = self.path(family.name)
        export_memory: list[PhaseMemory] = []
        sub, flags = self.export_graph(family, graph, onnx_path, export_memory)
        if graph.export is None or not graph.export.ok:
            return graph, {}  # the graph entry holds the error and the calls it would serve
        shown = self.entry.name if self.single else f"{self.entry.name} [{family.name}]"
        calls = plural(len(family.indices), "call")
        self.progress(f"{shown}: exported in {graph.export.seconds:.1f}s ({calls} observed)")
        return graph, self.check_graph(family, sub, flags, graph, onnx_path, export_memory)

    def export_graph(
        self,
        family: Family,
        graph: GraphResult,
        onnx_path: Path,
        export_memory: list[PhaseMemory],
    ) -> tuple[InputObserver, Any]:
        """``graph.export`` of the family's calls, and the observer and batch flags it was
        exported from; once more with the family's own sizes, static, when the model fixes
        a dim the family inherits from other calls."""
        obs = self.entry.observer
        whole = family.indices == list(range(obs.num_obs())) and not family.without_missing
        sub = (
            obs
            if whole
            else obs.subset(
                family.indices,
                inherit_dynamic=family.inherit_dynamic,
                without_missing=family.without_missing,
            )
        )
        self.observers[tuple(family.indices)] = sub
        flags = _flags_for(sub, self.entry.set_batch_dimension_for)
        graph.export = self._export(family, sub, flags, onnx_path, export_memory, whole)
        if graph.export.ok or not self._model_fixes_inherited(family, sub, graph.export):
            return sub, flags
        # the dims it inherits from other calls are fixed by the model for these calls
        # (Mamba's prefill loops over its sequence): export them as observed, static
        family.inherit_dynamic = False
        sub = obs.subset(family.indices, inherit_dynamic=False)
        self.observers[tuple(family.indices)] = sub
        flags = _flags_for(sub, self.entry.set_batch_dimension_for)
        first = graph.export
        graph.export = self._export(family, sub, flags, onnx_path, export_memory, False)
        if graph.export.ok:
            why = first.cause.summary if first.cause else first.error
            graph.export.notes.append(
                f"{family.name}: exported with the sizes of its own calls, static: it "
                f"serves those sizes only (with the dims of the other graphs' calls: {why})"
            )
        return sub, flags

    def _export(
        self,
        family: Family,
        sub: InputObserver,
        flags: Any,
        onnx_path: Path,
        export_memory: list[PhaseMemory],
        whole: bool,
    ) -> ExportResult:
        with self.phase("export"):
            return export_model(
                self.entry,
                onnx_path,
                cache_dir=self.config.cache_dir,
                observer=None if whole else sub,
                set_batch_dimension_for=flags,
                call_numbers=None if whole else family.indices,
                cache_max_bytes=self.config.cache_max_bytes,
                measured=export_memory,
            )

    def check_graph(
        self,
        family: Family,
        sub: InputObserver,
        flags: Any,
        graph: GraphResult,
        onnx_path: Path,
        export_memory: list[PhaseMemory],
    ) -> dict[int, ObservationResult]:
        """The exported graph's session, replay, bundle, probe, variants and diagnosis; the
        rows of the calls it serves."""
        config, progress = self.config, self.progress
        shown = self.entry.name if self.single else f"{self.entry.name} [{family.name}]"
        with self.phase("session"):  # a 2.5 GB graph: 10-16 s, more than its replay
            session, failed = self.open_session(family, sub, graph, onnx_path, export_memory)
        if session is None:
            return failed
        rows = self.replay(family, sub, flags, session, shown)
        self.bundle(family, sub, graph, session, rows)
        if config.save_feeds and not self.feeds_saved:  # paired timing uses the main graph
            self.feeds_saved = True
            note = _save_feeds(sub, session, onnx_path, config)
            if note:
                progress(f"{shown}: {note}")
                self.notes.append(note)
        if config.probe:
            graph.probe = self.probe(sub, flags, session)
        if wanted(config):  # fp16, int8, optimized, other providers
            with self.phase("variants"):
                self.notes += serve_variants(
                    self.entry, config, sub, flags, session, graph, rows, onnx_path, progress
                )
        moving = set(stand_in_failures(graph, rows))  # served again by a graph of their own
        own = {i: r for i, r in rows.items() if i not in moving}
        step = SessionStep()
        failing = failing_calls(family.indices, own)
        if failing:
            with self.phase("diagnose"):
                step = session_step(sub, family.indices, failing, own, session)
        del session  # the first-divergence run opens its own: one onnxruntime copy at a time
        graph.diagnosis = self.diagnose(family, sub, own, step, onnx_path)
        return rows

    def diagnose(
        self,
        family: Family,
        sub: InputObserver,
        rows: dict[int, ObservationResult],
        step: SessionStep,
        onnx_path: Path,
    ) -> Diagnosis | None:
        """Why the graph disagrees, only when it does (last: the probe and the variants ran
        on the model as observed; the diagnosis restores what its re-runs change)."""
        probe_call, self.probe_call = self.probe_call, None
        if not step.failing and probe_call is None:
            return None
        with self.phase("diagnose"):
            return diagnose_graph(
                self.entry.model,
                self.method,
                sub,
                family.indices,
                rows,
                step,
                str(onnx_path),
                atol=self.config.atol,
                rtol=self.config.rtol,
                method_name=self.entry.method_name,
                probe_call=probe_call,
            )

    def open_session(
        self,
        family: Family,
        sub: InputObserver,
        graph: GraphResult,
        onnx_path: Path,
        export_memory: list[PhaseMemory],
    ) -> tuple[Any, dict[int, ObservationResult]]:
        """The graph's onnxruntime session, its creation and first run measured into
        ``graph.footprint``; ``(None, rows)`` when it cannot be created (each call's row
        says why)."""
        warm_up_onnxruntime()  # its once-per-process costs, outside the figures
        try:
            with measure() as session_memory:
                session = make_session(onnx_path, threads=self.config.threads)
        except Exception as e:
            low = low_precision_dtype(self.entry.model, self.entry.observer)
            error = error_tail(e)
            cause = explain_missing_kernel(str(e), low) or explain_exception(e)
            return None, {
                i: ObservationResult(
                    index=i, ok=False, family=family.name, error=error, cause=cause
                )
                for i in family.indices
            }
        exported = export_memory[-1] if export_memory else None  # None: from the cache
        graph.footprint = graph_footprint(exported, session_memory)
        measure_first_run(sub, session, graph.footprint)
        return session, {}

    @staticmethod
    def _model_fixes_inherited(family: Family, sub: InputObserver, export: ExportResult) -> bool:
        """The export of a family failed because the model fixes a dim that varied only in
        other families' calls (inherited dynamic): worth one export without them."""
        from observer_ci.pipeline.causes import CONSTRAINT_VIOLATION

        if not family.inherit_dynamic or export.cause is None:
            return False
        if export.cause.kind != CONSTRAINT_VIOLATION:
            return False
        own = sub.subset(list(range(sub.num_obs())), inherit_dynamic=False)
        return own.dynamic_dims() != sub.dynamic_dims()

    def replay(
        self, family: Family, sub: InputObserver, flags: Any, session: Any, shown: str
    ) -> dict[int, ObservationResult]:
        """Every call of ``family`` replayed on its graph: one row per model call number."""
        config = self.config
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
                    budget_s=config.time_budget_s,
                    threads=config.torch_threads,
                    outputs=config.outputs,
                ).result
                row.index, row.family = index, family.name
                row.stand_ins, _made_up = stand_ins(sub, local, dynamic)
                if row.stand_ins:
                    row.note = (
                        f"served by graph {family.name} with 0-length stand-ins for the absent "
                        f"inputs {row.stand_ins[:4]}"
                    )
                rows[index] = row
        self.progress(
            f"{shown}: replayed {len(family.indices)} calls "
            f"(up to {config.warmup} warm-up + {config.repeat} timed runs each, "
            f"{config.time_budget_s}s budget per call and engine) "
            f"in {time.perf_counter() - begin:.1f}s"
        )
        return rows

    def bundle(
        self,
        family: Family,
        sub: InputObserver,
        graph: GraphResult,
        session: Any,
        rows: dict[int, ObservationResult],
    ) -> None:
        """The reproducer of a graph with a failing call (every graph with ``bundles=all``):
        ``<out>/bundles/<model>/<graph>/``, named in the model's notes."""
        mode = self.config.bundles
        failing = any(not r.success for r in rows.values())
        if mode == "none" or (mode == "failing" and not failing) or graph.export is None:
            return
        from observer_ci.pipeline.bundle import write_bundle
        from observer_ci.pipeline.diff import flatten_outputs
        from observer_ci.pipeline.environment import environment_fingerprint
        from observer_ci.pipeline.replay import match_feeds

        names = [i.name for i in session.get_inputs()]
        calls = []
        for local, index in enumerate(family.indices):
            row = rows.get(index)
            try:
                feeds = match_feeds(names, sub.leaf_names(), sub.infer_arguments(local, flat=True))
            except Exception:  # the row already says why this call cannot be fed
                continue
            measured = {"abs": row.abs, "rel": row.rel, "success": row.success} if row else {}
            calls.append((index, feeds, flatten_outputs(sub.observations[local].outputs), measured))
        folder = (
            self.out_dir / "bundles" / safe_filename(self.entry.name) / safe_filename(family.name)
        )
        try:
            _, used = write_bundle(
                folder,
                model=self.entry.name,
                graph=family.name,
                onnx_path=Path(graph.export.onnx_path),
                calls=calls,
                output_names=list(graph.export.output_names or []),
                tolerances=self.bundle_tolerances(sub, family),
                environment=environment_fingerprint(),
                budget=max(0, self.bundle_budget),
            )
        except Exception as e:  # the check's verdict stands without its reproducer
            self.notes.append(f"reproducer of graph {family.name} not written: {error_tail(e)}")
            return
        self.bundle_budget -= used
        where = folder.relative_to(self.out_dir).as_posix()
        self.notes.append(
            f"reproducer: {where} (in CI, the run's `{BUNDLES_ARTIFACT}` artifact, "
            f"`-LABEL` for a matrix leg: "
            f"`gh run download RUN_ID -n {BUNDLES_ARTIFACT} -D bundles`, then "
            f"`observer-ci replay {where}`)"
        )

    def bundle_tolerances(self, sub: InputObserver, family: Family) -> dict[str, Any]:
        """A reproducer's tolerances: the model's, and its outputs' with their names."""
        from observer_ci.pipeline.diff import output_names

        config = self.config
        tolerances: dict[str, Any] = {"abs_max": config.atol, "rel_max": config.rtol}
        if config.outputs and family.indices:
            tolerances["outputs"] = [list(o) for o in config.outputs]
            tolerances["output_paths"] = output_names(sub.observations[0].outputs)
        return tolerances

    def probe(self, sub: InputObserver, flags: Any, session: Any) -> ProbeResult:
        """The unseen-shape probe of one graph (an error becomes a failed probe)."""
        with self.phase("probe"):
            try:
                return run_probe(
                    sub,
                    self.method,
                    session,
                    set_batch_dimension_for=flags,
                    atol=self.config.atol,
                    rtol=self.config.rtol,
                    on_mismatch=self._probe_mismatch,
                    outputs=self.config.outputs,
                )
            except Exception as e:
                return ProbeResult(ran=True, ok=False, error=error_tail(e))

    def _probe_mismatch(self, args: tuple[Any, ...], kwargs: dict[str, Any], feeds: Any) -> None:
        self.probe_call = (args, kwargs, feeds)  # the diagnosis locates the module there

    def merge(self, graphs: list[GraphResult]) -> GraphResult | None:
        """``decoder_model_merged``: the two decoder graphs behind one ``If`` with their
        weights stored once, checked on every observed call (``None`` when the families are
        not a decoder and a decoder with past, or one of them failed)."""
        by_name = {g.name: g for g in graphs}
        past, first = by_name.get(ROLE_DECODER_WITH_PAST), by_name.get(ROLE_DECODER)
        if past is None or first is None or len(graphs) != 2:
            return None
        if not all(g.export is not None and g.export.ok for g in (past, first)):
            return None
        only_first = set(first.export.input_names) - set(past.export.input_names)
        if any(is_media_input(name) for name in only_first):
            return None  # a prefill taking image inputs the decode steps never pass
        from observer_ci.pipeline.diff import flatten_outputs, judge_outputs, max_diff, output_names
        from observer_ci.pipeline.merged_decoder import MERGED_NAME, merged_feeds
        from observer_ci.pipeline.replay import match_feeds

        path = self.path(MERGED_NAME)
        graph = GraphResult(
            name=MERGED_NAME,
            observation_indices=sorted(past.observation_indices + first.observation_indices),
        )
        begin = time.perf_counter()
        with self.phase("merge"):
            try:
                merged, facts = self._merged_file(past.export, first.export, path)
                # checked, never timed: no prepacked weights (the run's peak RSS at 600M)
                session = make_session(path, threads=self.config.threads, prepack=False)
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
                        outputs = sub.observations[local].outputs
                        diff = max_diff(flatten_outputs(outputs), got)
                        ok, _ = judge_outputs(  # the tolerances its calls are judged by
                            diff,
                            output_names(outputs),
                            self.config.atol,
                            self.config.rtol,
                            self.config.outputs,
                        )
                        graph.abs = max(graph.abs or 0.0, diff.abs)
                        graph.rel = max(graph.rel or 0.0, diff.rel)
                        worst = ok if worst is None else worst and ok
                graph.success = bool(worst)
            except Exception as e:
                graph.reason = f"not merged: {error_tail(e, 300)}"
                graph.success = False
                return graph
        graph.export = merged
        graph.export.seconds = time.perf_counter() - begin
        graph.reason = f"{ROLE_DECODER} and {ROLE_DECODER_WITH_PAST} behind one If on {facts}"
        self.progress(
            f"{self.entry.name} [{MERGED_NAME}]: merged, max abs {graph.abs} over "
            f"{len(graph.observation_indices)} calls"
        )
        return graph

    def _merged_file(
        self, past: ExportResult, first: ExportResult, path: Path
    ) -> tuple[ExportResult, str]:
        """The merged file at ``path`` through the export cache (keyed by both families'
        keys: a hit rebuilds nothing), and what the merge shared, for the graph's reason."""

        def build() -> ExportResult:
            from observer_ci.pipeline.export import describe_onnx
            from observer_ci.pipeline.merged_decoder import merge_decoders

            facts = merge_decoders(past.onnx_path or "", first.onnx_path or "", path)
            result = describe_onnx(path)
            result.notes = [
                f"{_MERGE_FACTS}`use_cache_branch`: {facts.shared_initializers} initializers "
                f"stored once ({facts.bytes_saved} bytes saved)"
            ]
            return result

        def key() -> str:
            if not (past.cache_key and first.cache_key):
                raise ValueError("a family without a cache key")
            text = f"merged-decoder-v1 {past.cache_key} {first.cache_key}"
            return hashlib.sha256(text.encode()).hexdigest()

        cache_dir = self.config.cache_dir
        result = cached_export(build, key, path, cache_dir, self.config.cache_max_bytes)
        if not result.ok:
            raise MergeError(result.error or "the merged decoder was not built")
        facts = [n for n in result.notes if n.startswith(_MERGE_FACTS)]
        result.notes = [n for n in result.notes if not n.startswith(_MERGE_FACTS)]
        return result, facts[0][len(_MERGE_FACTS) :] if facts else "`use_cache_branch`"


# how the merge's facts travel in the (cached) ExportResult's notes, removed on reading
_MERGE_FACTS = "merge facts: "


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
