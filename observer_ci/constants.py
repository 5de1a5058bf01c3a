"""Facts shared across modules, each defined once."""

from __future__ import annotations

# The invisible first line of the sticky comment; it identifies our comment on a pull request.
MARKER = "<!-- observer-ci:sticky-comment -->"
# GitHub rejects issue comment bodies longer than this (characters).
GITHUB_COMMENT_MAX_CHARS = 65536
# GitHub rejects step summaries over 1 MiB (bytes).
STEP_SUMMARY_MAX_BYTES = 1_000_000
# The ONNX opset every export targets.
DEFAULT_OPSET = 20
