"""One graph per call family: export (through the cache), replay, probe, merge."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import Any

from observer_ci.core.constants import DEFAULT_OPSET
from observer_ci.core.errors import error_tail
from observer_ci.core.results import (
    ExportResult,
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
from observer_ci.pipeline.causes import (
    explain_exception,
)
from observer_ci.pipeline.config import Progress, RunConfig
from observer_ci.pipeline.export import export_observed
from observer_ci.pipeline.export_cache import DEFAULT_CACHE_MAX_MB, MB, cached_export, export_key
from observer_ci.pipeline.phases import Phases
from observer_ci.pipeline.probe import run_probe
from observer_ci.pipeline.replay import make_session, replay_observation

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
        whole = family.indices == list(range(obs.num_obs())) and not family.without_missing
        inherit = family.inherit_dynamic
        sub = (
            obs
            if whole
            else obs.subset(
                family.indices, inherit_dynamic=inherit, without_missing=family.without_missing
            )
        )
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
        rows = self.replay(family, sub, flags, session, shown)
        if config.save_feeds and not self.feeds_saved:  # paired timing uses the main graph
            self.feeds_saved = True
            note = _save_feeds(sub, session, onnx_path, config)
            if note:
                progress(f"{shown}: {note}")
                self.notes.append(note)
        if config.probe:
            graph.probe = self.probe(sub, flags, session)
        return graph, rows

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
            f"({config.warmup} warm-up + {config.repeat} timed runs each) "
            f"in {time.perf_counter() - begin:.1f}s"
        )
        return rows

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
                )
            except Exception as e:
                return ProbeResult(ran=True, ok=False, error=error_tail(e))

    def merge(self, graphs: list[GraphResult]) -> GraphResult | None:
        """``decoder_model_merged``: the two decoder graphs behind one ``If`` with their
        weights stored once, checked on every observed call (``None`` when the families are
        not a decoder and a decoder with past, or one of them failed)."""
        from observer_ci.pipeline.diff import flatten_outputs, max_diff
        from observer_ci.pipeline.export import describe_onnx
        from observer_ci.pipeline.merged_decoder import MERGED_NAME, merge_decoders, merged_feeds
        from observer_ci.pipeline.replay import match_feeds

        by_name = {g.name: g for g in graphs}
        past, first = by_name.get(ROLE_DECODER_WITH_PAST), by_name.get(ROLE_DECODER)
        if past is None or first is None or len(graphs) != 2:
            return None
        if not all(g.export is not None and g.export.ok for g in (past, first)):
            return None
        if set(first.export.input_names) - set(past.export.input_names):
            return None  # a prefill taking image inputs the decode steps never pass
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
