"""Call families: groups of observed calls that one exported graph can serve.

A call that did not pass some inputs is replayed on a graph that takes them with a
*stand-in*. A 0-length tensor on a dynamic dim means "nothing" (an empty cache, no
memory) and is served by the same graph. An absent input whose dims never varied
would be fed zeros of a seen shape: made-up data (an encoder-decoder's first step has
no cross-attention cache yet; a capped sliding-window cache has no 0-length form). Such
calls form their own family and get their own graph, as the Hugging Face ONNX exports
do (``decoder_model`` without cache, ``decoder_with_past_model`` with it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from observer_ci.core.cache_inputs import is_cache_input, is_media_input
from observer_ci.core.errors import listed
from observer_ci.observing.alignment import has_empty_form
from observer_ci.observing.observer import InputObserver

# Hugging Face ONNX export file names, used when the roles match.
ROLE_DECODER = "decoder_model"
ROLE_DECODER_WITH_PAST = "decoder_with_past_model"
ROLE_SINGLE = "model"
ROLE_WINDOW_FULL = "with_past_window_full"  # hybrid cache: the sliding layers are capped


@dataclass
class Family:
    """Observed calls served by one graph."""

    name: str
    indices: list[int]
    reason: str = ""
    absent: list[str] = field(default_factory=list)  # inputs these calls did not pass
    role: str = ""  # its name when the cache inputs do not tell one (ROLE_WINDOW_FULL)
    inherit_dynamic: bool = True  # False: the model fixes sizes that varied in other calls
    without_missing: bool = False  # its graph does not take the inputs fed from missing=


def stand_ins(
    observer: InputObserver, index: int, dynamic: list[list[int]]
) -> tuple[list[str], list[str]]:
    """``(empty, made_up)``: absent inputs of one call fed as 0-length tensors / zeros.

    A value from ``missing=`` stands in for an input the call did not pass as well (the
    reference's meaning: it shapes the export, the model never ran on it): empty where
    it is 0-length on a dim past the batch, made up otherwise. An absent media input
    (``pixel_values``: :func:`is_media_input`) is never empty: the model branches on it.
    """
    names = observer.leaf_names()
    fed = set(observer.fed_missing(index))
    empty, made_up = [], []
    for name, t, dims in zip(names, observer.aligned_inputs(index), dynamic):
        if t is None:
            honest = has_empty_form(dims) and not is_media_input(name)
            (empty if honest else made_up).append(name)
        elif name in fed:
            is_empty = any(t.shape[d] == 0 for d in dims if d > 0)
            (empty if is_empty else made_up).append(name)
    return empty, made_up


def plan_families(observer: InputObserver, set_batch_dimension_for: Any = None) -> list[Family]:
    """One family for every call a shared graph serves honestly, one per made-up pattern.

    The first family is the main one (it serves the most calls, its graph is the model's
    ``export``). A single family keeps today's single graph.
    """
    dynamic = observer.dynamic_dims(set_batch_dimension_for)
    main: list[int] = []
    full_window: list[int] = []
    apart: dict[tuple[str, ...], list[int]] = {}
    made_up_of: dict[tuple[str, ...], list[str]] = {}
    for i in range(observer.num_obs()):
        empty, made_up = stand_ins(observer, i, dynamic)
        if made_up:
            apart.setdefault(tuple(empty + made_up), []).append(i)
            made_up_of[tuple(empty + made_up)] = made_up
        elif _window_full(observer, i):
            full_window.append(i)
        else:
            main.append(i)
    if not main or not full_window:
        main, full_window = sorted(main + full_window), []
    if not apart and not full_window:
        return [Family(ROLE_SINGLE, main)]
    families = []
    if main:
        families.append(Family("", main, absent=_absent_in_all(observer, main)))
    if full_window:
        reason = (
            "in these calls a sliding-window cache layer has reached its window while a "
            "full-attention layer keeps growing: the mask is built another way than in the "
            "calls before (one graph follows one way)"
        )
        # a capped layer's length is fixed by the model: dynamic elsewhere, static here
        full = Family("", full_window, reason, role=ROLE_WINDOW_FULL, inherit_dynamic=False)
        families.append(full)
    for absent, indices in apart.items():
        made_up = made_up_of[absent]
        one = len(made_up) == 1
        fed = _fed_missing(observer, indices)
        if fed:
            reason = (
                f"these calls did not pass {listed(absent, 2)}; the value given in missing= for "
                f"{listed(fed, 2)} only shapes the export (the model never ran on it): their "
                "graph does not take it"
            )
        else:
            reason = (
                f"these calls did not pass {listed(absent, 2)}; {listed(made_up, 2)} "
                f"{'has' if one else 'have'} no empty form (no dim but the batch varied): a "
                f"graph taking {'it' if one else 'them'} would run on made-up values"
            )
        family = Family("", indices, reason=reason, absent=list(absent), without_missing=bool(fed))
        families.append(family)
    return name_families(families)


def _fed_missing(observer: InputObserver, indices: list[int]) -> list[str]:
    return sorted({n for i in indices for n in observer.fed_missing(i)})


def split_family(
    family: Family, observer: InputObserver, failed: list[int], set_batch_dimension_for: Any = None
) -> list[Family]:
    """Moves calls that failed on a shared graph with stand-ins into families of their own."""
    dynamic = observer.dynamic_dims(set_batch_dimension_for)
    by_absent: dict[tuple[str, ...], list[int]] = {}
    for i in failed:
        empty, made_up = stand_ins(observer, i, dynamic)
        by_absent.setdefault(tuple(empty + made_up), []).append(i)
    kept = [i for i in family.indices if i not in failed]
    out = [replace(family, indices=kept)]
    for absent, indices in by_absent.items():
        reason = (
            f"these calls did not pass {listed(absent, 2)} and did not match torch on the shared "
            "graph with empty stand-ins: the model treats absent and empty differently"
        )
        fed = bool(_fed_missing(observer, indices))
        out.append(Family("", indices, reason=reason, absent=list(absent), without_missing=fed))
    return out


def name_families(families: list[Family]) -> list[Family]:
    """Hugging Face role names where a cache input tells decoder from decoder-with-past."""
    if len(families) == 1:
        families[0].name = ROLE_SINGLE
        return families
    taken: set[str] = set()
    for k, family in enumerate(families):
        cache_absent = any(is_cache_input(n) for n in family.absent)
        others_have_cache = any(
            not any(is_cache_input(n) for n in f.absent) for f in families if f is not family
        )
        if family.role:
            name = family.role
        elif cache_absent and others_have_cache:
            name = ROLE_DECODER
        elif not cache_absent and any(any(is_cache_input(n) for n in f.absent) for f in families):
            name = ROLE_DECODER_WITH_PAST
        elif family.absent:
            name = f"{ROLE_SINGLE}_without_{family.absent[0]}"
        else:
            name = ROLE_SINGLE if k == 0 else f"{ROLE_SINGLE}_{k}"
        while name in taken:
            name = f"{name}_{k}"
        taken.add(name)
        family.name = name
    return families


def _absent_in_all(observer: InputObserver, indices: list[int]) -> list[str]:
    """Inputs none of these calls passed (a prefill family's empty cache): they name it."""
    names = observer.leaf_names()
    rows = [observer.aligned_inputs(i) for i in indices]
    return [n for j, n in enumerate(names) if all(row[j] is None for row in rows)]


def _window_full(observer: InputObserver, index: int) -> bool:
    """True when a cache argument of the call has a sliding layer at its window next to a
    full-attention layer (see :func:`observer_ci.observing.pytrees.sliding_window_full`)."""
    from observer_ci.observing.pytrees import sliding_window_full

    return any(sliding_window_full(v) for v in observer.observations[index].named.values())
