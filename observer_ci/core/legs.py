"""Merge the results of several jobs (matrix legs) into one run."""

from __future__ import annotations

import dataclasses

from observer_ci.core.results import SCHEMA_VERSION, ModelResult, RunResults


def merge_results(parts: list[RunResults]) -> RunResults:
    """Combine matrix job results; names in several parts become ``"name [label]"``."""
    labels = [part.label or f"part{i + 1}" for i, part in enumerate(parts)]
    counts: dict[str, int] = {}
    for part in parts:
        for name in {m.name for m in part.models}:
            counts[name] = counts.get(name, 0) + 1
    models: list[ModelResult] = []
    taken: set[str] = set()
    for part, label in zip(parts, labels, strict=True):
        for model in part.models:
            name = model.name if counts[model.name] == 1 else f"{model.name} [{label}]"
            name = _unique(name, taken)
            taken.add(name)
            models.append(dataclasses.replace(model, name=name))
    return RunResults(
        models=models,
        environment=_merge_environments(parts, labels),
        schema_version=SCHEMA_VERSION,
        label=_merged_label([part.label for part in parts]),
        created_at=max((p.created_at for p in parts), default=""),
    )


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name} #{n}" in taken:
        n += 1
    return f"{name} #{n}"


def _merged_label(labels: list[str]) -> str:
    """The labels the parts were given (``gpu+cpu``); "" when none was (``partN`` names a
    leg in the merged report only)."""
    return "+".join(label for label in dict.fromkeys(labels) if label)


def _merge_environments(parts: list[RunResults], labels: list[str]) -> dict:
    """Keys all parts agree on at top level, each part's own under ``"parts"``."""
    envs = [{k: v for k, v in p.environment.items() if k != "parts"} for p in parts]
    common: dict = {}
    if envs:
        for key, value in envs[0].items():
            if all(key in env and env[key] == value for env in envs[1:]):
                common[key] = value
    common["parts"] = [
        {"label": label, "environment": dict(part.environment)}
        for part, label in zip(parts, labels, strict=True)
    ]
    return common
