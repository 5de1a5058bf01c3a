"""What the first-divergence search reads from the exporter's node metadata: the user's
frame in a stack trace, module scopes, and the known op cases' table."""

from __future__ import annotations

import os

import numpy as np
import torch

from observer_ci.core.constants import (
    KNOWN_OP_CASE_NEXT_STEPS,
    KNOWN_OP_CASES,
    MASKED_POSITIONS,
    PADDING_FAST_PATH,
)
from observer_ci.pipeline import divergence_graph, divergence_lines

TORCH_FILE = os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "linear.py")
TRACE = (
    'File "/src/app/model.py", line 14, in forward\n'
    "    for b in self.blocks: x = b(x)\n"
    '  File "/src/app/blocks.py", line 6, in forward\n'
    "    y = self.act(self.lin(x))\n"
    f'  File "{TORCH_FILE}", line 134, in forward\n'
    "    return F.linear(input, self.weight, self.bias)"
)


def test_the_user_frame_is_the_deepest_outside_torch():
    assert divergence_graph.user_frame(TRACE) == (
        "/src/app/blocks.py",
        6,
        "y = self.act(self.lin(x))",
    )


def test_a_trace_of_torch_frames_only_has_no_user_frame():
    assert divergence_graph.user_frame(f'File "{TORCH_FILE}", line 1, in forward\n    x') is None
    assert divergence_graph.user_frame("") is None


def test_a_frame_shows_its_file_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside = str(tmp_path / "pkg" / "model.py")
    assert divergence_graph.format_frame((inside, 12, "y = y + 1")) == os.path.join(
        "pkg", "model.py:12: y = y + 1"
    )
    assert divergence_graph.format_frame(("/elsewhere/model.py", 3, "")) == "model.py:3"


def test_scopes_drop_the_op_name_and_a_method_wrapper():
    scopes = "['', 'wrapped', 'wrapped.body.blocks.0', 'linear']"
    assert divergence_graph.module_paths(scopes, "wrapped") == ("", "body.blocks.0")
    assert divergence_graph.module_paths("['', 'blocks.0', 'add']", None) == ("", "blocks.0")
    assert divergence_graph.module_paths("not a list", None) == ()


def test_every_known_case_has_a_next_step():
    assert set(KNOWN_OP_CASES.values()) | {PADDING_FAST_PATH, MASKED_POSITIONS} == set(
        KNOWN_OP_CASE_NEXT_STEPS
    )


def node(op_type: str) -> divergence_graph.Node:
    return divergence_graph.Node(0, "n", op_type, ["a"], ["b"], ("",), "", None)


def test_a_cast_is_a_rounding_case_only_from_float_to_integer():
    to_int = {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.int64)}
    to_float = {"a": np.zeros(2, np.int64), "b": np.zeros(2, np.float32)}
    widened = {"a": np.zeros(2, np.int32), "b": np.zeros(2, np.int64)}
    assert divergence_lines.known_case(node("Cast"), to_int) == "rounding"
    assert divergence_lines.known_case(node("Cast"), to_float) is None
    assert divergence_lines.known_case(node("Cast"), widened) is None
    assert divergence_lines.known_case(node("Div"), widened) == "rounding"
    assert divergence_lines.known_case(node("Div"), to_int | {"b": np.zeros(2, np.float32)}) is None
    assert divergence_lines.known_case(node("TopK"), {}) == "topk_ties"
    assert divergence_lines.known_case(node("Add"), to_int) is None
