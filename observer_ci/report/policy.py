"""The policy file: per-model tolerances, ``fail_on`` and accepted regressions.

``.observer-ci.yml`` at the repository root (or ``--policy PATH`` / the action's ``policy``
input)::

    defaults:            # over the built-in thresholds; inputs and flags override these
      abs_max: 1e-4
      fail_on: default,latency_ratio
    models:              # glob on model names; later entries override earlier ones
      encoder_*:
        abs_max: 1e-2    # more specific than any input: this model's own tolerance
      legacy_lstm:
        accept: [latency_ratio, node_count_growth]   # reported, never fail the build

Precedence, lowest first: built-in defaults, the file's ``defaults``, the ``thresholds`` /
``fail_on`` inputs and flags, the file's matching ``models`` entries. Every key is checked:
an unknown key, a wrong type or a bad rule name is an error naming the file, the line and
the valid keys (exit 2). Torch-free: the parent and the child read the same file.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observer_ci.report.rules import (
    ACCEPTED,
    RULES,
    Regression,
    Thresholds,
    parse_fail_on,
    parse_thresholds,
    threshold_keys,
)

DEFAULT_POLICY_FILE = ".observer-ci.yml"
SECTION_KEYS = ("defaults", "models")
ENTRY_KEYS = (*threshold_keys(), "fail_on", "accept")


class PolicyError(ValueError):
    """A policy file that cannot be used: the message names the file and the line."""


@dataclass(frozen=True)
class Entry:
    """One section of the file: ``defaults`` or one ``models`` pattern."""

    pattern: str
    line: int
    thresholds: dict[str, float] = field(default_factory=dict)
    fail_on: frozenset[str] | None = None
    accept: frozenset[str] = frozenset()
    note: str = ""  # why it accepts (a maintainer's accept path: who and when)


@dataclass(frozen=True)
class Policy:
    """What the file says; :meth:`thresholds_for` and friends give one model's values."""

    path: str = ""
    defaults: Entry = Entry("*", 0)
    models: tuple[Entry, ...] = ()

    def base_thresholds(self, given: str | None) -> Thresholds:
        """The run's thresholds: the file's defaults under the ``thresholds`` input."""
        return parse_thresholds(
            given, dataclasses.replace(Thresholds(), **self.defaults.thresholds)
        )

    def base_fail_on(self, given: str | None) -> set[str]:
        """The run's ``fail_on``: the input unless it is empty or ``default``, then the file's."""
        if given and given.strip().lower() != "default":
            return parse_fail_on(given)
        return (
            set(self.defaults.fail_on)
            if self.defaults.fail_on is not None
            else parse_fail_on(given)
        )

    def matching(self, name: str) -> list[Entry]:
        return [e for e in self.models if fnmatch.fnmatchcase(name, e.pattern)]

    def thresholds_for(self, name: str, run: Thresholds) -> Thresholds:
        updates: dict[str, float] = {}
        for entry in self.matching(name):
            updates.update(entry.thresholds)
        return dataclasses.replace(run, **updates) if updates else run

    def fail_on_for(self, name: str, run: set[str]) -> set[str]:
        chosen = run
        for entry in self.matching(name):
            if entry.fail_on is not None:
                chosen = set(entry.fail_on)
        return chosen

    def accepted_for(self, name: str) -> set[str]:
        return {rule for entry in self.matching(name) for rule in entry.accept}

    def accept_note(self, name: str, rule: str) -> str:
        """Why ``rule`` is accepted for model ``name``: the last matching entry's note, the
        file's wording by default."""
        notes = [e.note for e in self.matching(name) if rule in e.accept]
        return (notes[-1] if notes else "") or ACCEPTED

    def accept(self, regressions: Iterable[Regression]) -> list[Regression]:
        """The regressions, those this policy accepts reported without failing the build."""
        return [
            dataclasses.replace(
                r,
                fails_build=False,
                message=f"{self.accept_note(r.model, r.rule)}: {r.message}",
                accepted=self.accept_note(r.model, r.rule),
            )
            if r.rule in self.accepted_for(r.model)
            else r
            for r in regressions
        ]

    def describe(self) -> list[str]:
        """One line per entry of the file, for the report's legend (the effective values)."""
        lines = []
        for entry in (self.defaults, *self.models):
            parts = [f"{k}={v:g}" for k, v in entry.thresholds.items()]
            if entry.fail_on is not None:
                parts.append("fail_on " + (",".join(sorted(entry.fail_on)) or "none"))
            if entry.accept:
                parts.append("accepts " + ",".join(sorted(entry.accept)))
            if parts:
                where = "defaults" if entry.line == 0 or entry is self.defaults else entry.pattern
                lines.append(f"{where}: {'; '.join(parts)}")
        return lines

    def tolerances(self) -> list[tuple[str, float | None, float | None]]:
        """(pattern, abs_max, rel_max) of the entries that set one: the child decides each
        call's success with them (the verdict and the rule agree)."""
        return [
            (e.pattern, e.thresholds.get("abs_max"), e.thresholds.get("rel_max"))
            for e in self.models
            if "abs_max" in e.thresholds or "rel_max" in e.thresholds
        ]


def find_policy(
    explicit: str | os.PathLike[str] | None, root: str | os.PathLike[str] = "."
) -> Policy:
    """The policy named (an error when missing), else ``.observer-ci.yml`` under ``root``
    when present, else an empty policy."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise PolicyError(f"{path}: policy file not found")
        return load_policy(path)
    default = Path(root) / DEFAULT_POLICY_FILE
    return load_policy(default) if default.is_file() else Policy()


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Reads and checks a policy file (YAML); :class:`PolicyError` names file and line."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text)
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyError(f"{path}: cannot be read ({e})") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise PolicyError(f"{where}: not valid YAML ({getattr(e, 'problem', e)})") from e
    if root is None:
        return Policy(str(path))
    sections = _mapping(root, path, "the policy", SECTION_KEYS)
    defaults = Entry("*", 0)
    models: list[Entry] = []
    for key, (key_node, value) in sections.items():
        if key == "defaults":
            defaults = _entry("*", value, path, key_node.start_mark.line + 1)
        else:
            for pattern, (pattern_node, entry) in _mapping(value, path, "models", None).items():
                models.append(_entry(pattern, entry, path, pattern_node.start_mark.line + 1))
    return Policy(str(path), defaults, tuple(models))


def _mapping(node: Any, path: Path, what: str, valid: tuple[str, ...] | None) -> dict[str, Any]:
    import yaml

    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode):
        raise PolicyError(f"{path}:{line}: {what} must be a mapping of keys to values")
    found: dict[str, Any] = {}
    for key_node, value in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        at = f"{path}:{key_node.start_mark.line + 1}"
        if not isinstance(key, str) or (valid is not None and key not in valid):
            shown = f"valid keys: {', '.join(valid)}" if valid else "keys are model name globs"
            raise PolicyError(f"{at}: unknown key {key!r} in {what}; {shown}")
        if key in found:
            raise PolicyError(f"{at}: {key!r} appears twice in {what}")
        found[key] = (key_node, value)
    return found


def _entry(pattern: str, node: Any, path: Path, line: int) -> Entry:
    import yaml

    values = _mapping(node, path, f"entry {pattern!r}", ENTRY_KEYS)
    thresholds: dict[str, float] = {}
    fail_on: frozenset[str] | None = None
    accept: frozenset[str] = frozenset()
    for key, (key_node, value) in values.items():
        at = f"{path}:{key_node.start_mark.line + 1}"
        if key in ("fail_on", "accept"):
            items = _string_list(value, at, key)
            unknown = [
                i for i in items if i.lstrip("-").lower() not in (*RULES, "all", "none", "default")
            ]
            if unknown or (key == "accept" and any(i not in RULES for i in items)):
                bad = unknown or [i for i in items if i not in RULES]
                raise PolicyError(
                    f"{at}: {key}: unknown rule {bad[0]!r}; rules: {', '.join(RULES)}"
                )
            if key == "fail_on":
                fail_on = frozenset(parse_fail_on(",".join(items)))
            else:
                accept = frozenset(items)
            continue
        if not isinstance(value, yaml.ScalarNode) or value.tag.endswith((":bool", ":null")):
            raise PolicyError(f"{at}: {key} must be a number")
        try:
            number = float(value.value)
        except ValueError:
            raise PolicyError(f"{at}: {key} must be a number, got {value.value!r}") from None
        if number != number or number < 0:
            raise PolicyError(f"{at}: {key} must be a non-negative number, got {value.value!r}")
        thresholds[key] = number
    return Entry(pattern, line, thresholds, fail_on, accept)


def _string_list(node: Any, at: str, key: str) -> list[str]:
    import yaml

    if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str) and node.value.strip():
        return [p.strip() for p in node.value.replace(" ", ",").split(",") if p.strip()]
    if isinstance(node, yaml.SequenceNode) and all(
        isinstance(n, yaml.ScalarNode) for n in node.value
    ):
        return [n.value.strip() for n in node.value if n.value.strip()]
    raise PolicyError(f"{at}: {key} must be a rule name or a list of them")
