"""Numbers as short text, and the Markdown pipe table the report is built from.

Tables are laid out by ``tabulate`` (GitHub format), imported on the first table
so the parent's start-up does not pay for it. Cells are not padded (``stralign=None``):
a row of a golden report changes in a diff only when its own cells do, and a wide
message column does not spend the comment's 65,536 characters on spaces. Every cell
is escaped here, before tabulate sees it, unless it is :class:`Markup` the report
wrote; tabulate's number parsing is off, so a cell is printed exactly as escaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from observer_ci.core.constants import TENSOR_TYPE_CODES
from observer_ci.report.escape import escape_cell

NONE = "–"
_TENSOR_RE = re.compile(r"\bT(\d+)s(\d+(?:x\d+)*|scalar)\b")
_PLAIN_DIM_RE = re.compile(r"^[A-Za-z0-9_]+$")
_TYPE_NAMES = {str(code): name for name, code in TENSOR_TYPE_CODES.items()}


class Markup(str):
    """Trusted Markdown written by the report itself (emoji, bold): not escaped again."""


def format_float(value: float | int | None) -> str:
    """Compact number: ``3.2e-07``, ``0.0123``, ``42``; None is ``–``."""
    if value is None:
        return NONE
    if isinstance(value, (bool, int)):
        return str(value)
    if value != value:  # NaN
        return "nan"
    return f"{value:.3g}"


def format_seconds(seconds: float | None) -> str:
    """Human duration: ``12.3 ms``, ``4.56 µs``, ``2.5 s``, ``3 min 5 s``; None is ``–``."""
    if seconds is None:
        return NONE
    if seconds != seconds:
        return "nan"
    if seconds == 0:
        return "0 s"
    magnitude = abs(seconds)
    if magnitude >= 60:
        minutes, rest = divmod(round(magnitude), 60)
        sign = "-" if seconds < 0 else ""
        return f"{sign}{minutes} min {rest} s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if magnitude >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_seconds_range(low: float, high: float) -> str:
    """``1.9–2.1 ms``, or ``940 µs–1.22 ms`` when the ends need different units."""
    low_text, high_text = format_seconds(low), format_seconds(high)
    low_number, _, low_unit = low_text.rpartition(" ")
    high_number, _, high_unit = high_text.rpartition(" ")
    if low_unit == high_unit and low_number and high_number and "min" not in low_text + high_text:
        return f"{low_number}–{high_text}"
    return f"{low_text}–{high_text}"


def format_bytes(size: int | float | None) -> str:
    """Human size in binary units: ``512 B``, ``1.5 KiB``, ``12.3 MiB``; None is ``–``."""
    if size is None:
        return NONE
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} TiB"


def format_ratio(value: float | None, *, digits: int = 3) -> str:
    """``×1.52`` (``digits`` significant digits); None is ``–``."""
    if value is None:
        return NONE
    return f"×{format_float(value)}" if digits == 3 else f"×{value:.{digits}g}"


def format_ratio_range(low: float | None, high: float | None) -> str:
    """``×0.98–1.12``; ``–`` when either end is missing."""
    if low is None or high is None:
        return NONE
    return f"×{format_float(low)}–{format_float(high)}"


def format_shape(shape: Iterable[int | str] | None) -> str:
    """``2×8``; a scalar is ``()``; a missing input is ``–``; a dim that is an expression
    is bracketed: ``batch×(past + seq)``."""
    if shape is None:
        return NONE
    dims = [
        str(d) if _PLAIN_DIM_RE.match(str(d)) or isinstance(d, int) else f"({d})" for d in shape
    ]
    return "×".join(dims) if dims else "()"


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, None when either is missing or ``den`` is 0."""
    if num is None or den is None or den == 0:
        return None
    return num / den


def readable_tensors(summary: str) -> str:
    """``dict(x:T7s2x5)`` as ``dict(x:int64[2×5])``: the per-call summaries spelled out."""

    def spell(match: re.Match[str]) -> str:
        dtype = _TYPE_NAMES.get(match.group(1), f"T{match.group(1)}")
        dims = match.group(2)
        return f"{dtype} scalar" if dims == "scalar" else f"{dtype}[{dims.replace('x', '×')}]"

    return _TENSOR_RE.sub(spell, summary)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[object]], *, max_cell: int = 300
) -> str:
    """A GitHub pipe table; cells are escaped onto one line (capped at ``max_cell`` raw
    characters) unless they are :class:`Markup`. Every row must have the header's length."""
    from tabulate import tabulate  # lazy: only a report pays for it

    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row has {len(row)} cells, header has {len(header)}")
    cells = [[_cell(c, max_cell) for c in row] for row in rows]
    lines = tabulate(
        cells,
        headers=[_cell(h, None) for h in header],
        tablefmt="github",
        disable_numparse=True,
        stralign=None,  # no padding (see the module docstring)
    ).split("\n")
    # tabulate sizes the delimiter row by its measure of the widest cell, which counts an
    # emoji as 1 or 2 columns depending on whether wcwidth is installed: a fixed delimiter
    # keeps report.md the same bytes on every machine
    lines[1] = "|" + "---|" * len(header)
    return "\n".join(lines)


def _cell(value: object, max_chars: int | None) -> str:
    if isinstance(value, Markup):
        return str(value)
    return escape_cell(value, max_chars, newline=" ")
