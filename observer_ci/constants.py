"""Facts shared across modules, each defined once."""

from __future__ import annotations

# The invisible first line of the sticky comment; it identifies our comment on a pull request.
# The report starts with this bare form; when posting, :mod:`observer_ci.github` replaces it
# with the full form carrying the comment key, head SHA and run (see ``sticky_marker``):
#   <!-- observer-ci:sticky-comment key=<key> sha=<sha> run=<run id> attempt=<n> -->
# A comment whose first line is the bare form (older releases) counts as key "default".
MARKER = "<!-- observer-ci:sticky-comment -->"
MARKER_PREFIX = "<!-- observer-ci:sticky-comment"
# The comment key when none is given: one sticky comment per pull request.
DEFAULT_COMMENT_KEY = "default"
# What a comment key may contain (it is written into the marker, an HTML comment).
COMMENT_KEY_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
# GitHub rejects issue comment bodies longer than this (characters).
GITHUB_COMMENT_MAX_CHARS = 65536
# GitHub rejects step summaries over 1 MiB (bytes).
STEP_SUMMARY_MAX_BYTES = 1_000_000
# The ONNX opset every export targets.
DEFAULT_OPSET = 20
# The onnxruntime inputs a run saves for paired base/head timing (``*.feeds.npz``), all
# models of the run together: calls past it are not saved (a note on the model says so).
FEEDS_MAX_BYTES = 256 * 1024 * 1024
# Exit codes of the action and the command line: 1 means "a fail_on rule tripped" and
# nothing else; a bug or an unexpected failure of observer-ci itself is 3.
EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_INTERNAL_ERROR = 3
