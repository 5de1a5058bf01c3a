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
      big_*:
        skip: "needs 40 GB; checked nightly"         # not exported nor run, shown as skipped
      tiny_llama:
        outputs:         # glob on output names (their path in the model's output)
          logits: {abs_max: 1e-2}
          "past_key_values.*": {abs_max: 1e-4, rel_max: 1e-3}

Precedence, lowest first: built-in defaults, the file's ``defaults``, the ``thresholds`` /
``fail_on`` inputs and flags, the file's matching ``models`` entries. Every key is checked:
an unknown key, a wrong type or a bad rule name is an error naming the file, the line and
the valid keys (exit 2). Torch-free: the parent and the child read the same file.

A ``skip`` is a model's own: it belongs under ``models``, and one matching no model is a
warning of the run. An ``outputs`` entry sets ``abs_max`` / ``rel_max`` of the outputs whose
name matches (later entries win, unset values are the model's); outputs are named by their
path in the model's output, dotted (``logits``, ``past_key_values.key_cache.0``; a lone
tensor is ``output``, a tuple's items ``0``, ``1``...).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observer_ci.core.tolerances import OutputTolerance
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
ENTRY_KEYS = (*threshold_keys(), "fail_on", "accept", "skip", "outputs")
OUTPUT_KEYS = ("abs_max", "rel_max")


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
    skip: str | None = None  # why the model is not run
    outputs: tuple[OutputTolerance, ...] = ()


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

    def skip_for(self, name: str) -> str | None:
        """Why the file skips model ``name`` (the last matching entry's), else None."""
        reasons = [e.skip for e in self.matching(name) if e.skip is not None]
        return reasons[-1] if reasons else None

    def outputs_for(self, name: str) -> tuple[OutputTolerance, ...]:
        """Model ``name``'s per-output tolerances, in file order (later entries win)."""
        return tuple(o for entry in self.matching(name) for o in entry.outputs)

    def skips(self) -> list[tuple[str, str]]:
        """(pattern, reason) of every ``skip``: the child leaves those models out."""
        return [(e.pattern, e.skip) for e in self.models if e.skip is not None]

    def output_tolerances(self) -> list[tuple[str, str, float | None, float | None]]:
        """(model pattern, output pattern, abs_max, rel_max), for the child."""
        return [(e.pattern, *o) for e in self.models for o in e.outputs]

    def effective(self, names: list[str], run: Thresholds) -> list[str]:
        """One line per model some entry matches: its effective tolerances, ``fail_on``,
        accepted rules, output tolerances or skip (the legend's "values per model")."""
        lines = []
        for name in names:
            entries = self.matching(name)
            if not entries:
                continue
            skip = self.skip_for(name)
            if skip is not None:
                lines.append(f"{name}: skipped ({skip})")
                continue
            th = self.thresholds_for(name, run)
            parts = [f"abs_max={th.abs_max:g}", f"rel_max={th.rel_max:g}"]
            for pattern, abs_max, rel_max in self.outputs_for(name):
                a = th.abs_max if abs_max is None else abs_max
                r = th.rel_max if rel_max is None else rel_max
                parts.append(f"outputs {pattern} (abs_max={a:g}, rel_max={r:g})")
            if any(e.fail_on is not None for e in entries):
                parts.append(
                    "fail_on " + (",".join(sorted(self.fail_on_for(name, set()))) or "none")
                )
            if self.accepted_for(name):
                parts.append("accepts " + " ".join(sorted(self.accepted_for(name))))
            lines.append(f"{name}: {', '.join(parts)}")
        return lines

    def describe(self) -> list[str]:
        """One line per entry of the file, for the report's legend (the effective values)."""
        lines = []
        for entry in (self.defaults, *self.models):
            parts = [f"{k}={v:g}" for k, v in entry.thresholds.items()]
            if entry.fail_on is not None:
                parts.append("fail_on " + (",".join(sorted(entry.fail_on)) or "none"))
            if entry.accept:
                parts.append("accepts " + ",".join(sorted(entry.accept)))
            if entry.skip is not None:
                parts.append(f"skipped ({entry.skip})")
            parts += [f"outputs {o[0]}: {_limits_text(o[1], o[2])}" for o in entry.outputs]
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
            defaults = _entry("*", value, path, key_node.start_mark.line + 1, defaults=True)
        else:
            for pattern, (pattern_node, entry) in _mapping(value, path, "models", None).items():
                models.append(_entry(pattern, entry, path, pattern_node.start_mark.line + 1))
    return Policy(str(path), defaults, tuple(models))


def _limits_text(abs_max: float | None, rel_max: float | None) -> str:
    parts = [f"{k}={v:g}" for k, v in (("abs_max", abs_max), ("rel_max", rel_max)) if v is not None]
    return ", ".join(parts)


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
            shown = f"valid keys: {', '.join(valid)}" if valid else "keys are name globs"
            raise PolicyError(f"{at}: unknown key {key!r} in {what}; {shown}")
        if key in found:
            raise PolicyError(f"{at}: {key!r} appears twice in {what}")
        found[key] = (key_node, value)
    return found


def _entry(pattern: str, node: Any, path: Path, line: int, defaults: bool = False) -> Entry:
    values = _mapping(node, path, f"entry {pattern!r}", ENTRY_KEYS)
    thresholds: dict[str, float] = {}
    fail_on: frozenset[str] | None = None
    accept: frozenset[str] = frozenset()
    skip: str | None = None
    outputs: tuple[OutputTolerance, ...] = ()
    for key, (key_node, value) in values.items():
        at = f"{path}:{key_node.start_mark.line + 1}"
        if key in ("skip", "outputs") and defaults:
            raise PolicyError(f"{at}: {key} belongs under models (a model's own), not defaults")
        if key == "skip":
            skip = _reason(value, at)
            continue
        if key == "outputs":
            outputs = _outputs(value, path)
            continue
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
        thresholds[key] = _number(value, at, key)
    return Entry(pattern, line, thresholds, fail_on, accept, skip=skip, outputs=outputs)


def _number(value: Any, at: str, key: str) -> float:
    import yaml

    if not isinstance(value, yaml.ScalarNode) or value.tag.endswith((":bool", ":null")):
        raise PolicyError(f"{at}: {key} must be a number")
    try:
        number = float(value.value)
    except ValueError:
        raise PolicyError(f"{at}: {key} must be a number, got {value.value!r}") from None
    if number != number or number < 0:
        raise PolicyError(f"{at}: {key} must be a non-negative number, got {value.value!r}")
    return number


def _reason(node: Any, at: str) -> str:
    import yaml

    if not isinstance(node, yaml.ScalarNode) or node.tag.endswith((":bool", ":null")):
        raise PolicyError(f'{at}: skip must be the reason, as text (skip: "why")')
    reason = " ".join(str(node.value).split())
    if not reason:
        raise PolicyError(f'{at}: skip must give a reason (skip: "why")')
    return reason


def _outputs(node: Any, path: Path) -> tuple[OutputTolerance, ...]:
    """``outputs: {glob: {abs_max, rel_max}}`` of one model entry."""
    found = []
    for pattern, (pattern_node, limits) in _mapping(node, path, "outputs", None).items():
        what = f"outputs entry {pattern!r}"
        values = _mapping(limits, path, what, OUTPUT_KEYS)
        if not values:
            at = f"{path}:{pattern_node.start_mark.line + 1}"
            raise PolicyError(f"{at}: {what} sets nothing; valid keys: {', '.join(OUTPUT_KEYS)}")
        numbers = {
            key: _number(value, f"{path}:{key_node.start_mark.line + 1}", key)
            for key, (key_node, value) in values.items()
        }
        found.append((pattern, numbers.get("abs_max"), numbers.get("rel_max")))
    return tuple(found)


def _string_list(node: Any, at: str, key: str) -> list[str]:
    import yaml

    if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str) and node.value.strip():
        return [p.strip() for p in node.value.replace(" ", ",").split(",") if p.strip()]
    if isinstance(node, yaml.SequenceNode) and all(
        isinstance(n, yaml.ScalarNode) for n in node.value
    ):
        return [n.value.strip() for n in node.value if n.value.strip()]
    raise PolicyError(f"{at}: {key} must be a rule name or a list of them")
