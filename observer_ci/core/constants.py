"""Facts shared across modules, each defined once."""

from __future__ import annotations

# The invisible first line of the sticky comment; it identifies our comment on a pull request.
# The report starts with this bare form; when posting, :mod:`observer_ci.github.sticky` replaces it
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
# The dtype codes of the per-call input/output summaries (``T7s2x5`` is an int64 tensor of
# shape 2x5): ONNX's TensorProto numbers. structure.py writes them, the report reads them.
TENSOR_TYPE_CODES = {
    "float32": 1,
    "uint8": 2,
    "int8": 3,
    "int32": 6,
    "int64": 7,
    "bool": 9,
    "float16": 10,
    "float64": 11,
    "bfloat16": 16,
}
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

# The action's ``status`` output: the gate passed, a fail_on rule tripped, an input was
# wrong (exit code 2, nothing ran), or observer-ci itself failed (exit code 3). action.yml,
# composite/action.yml and the README list these.
GATE_SUCCESS = "success"
GATE_FAILURE = "failure"
GATE_BAD_INPUT = "bad-input"
GATE_ERROR = "error"
GATE_STATUSES = (GATE_SUCCESS, GATE_FAILURE, GATE_BAD_INPUT, GATE_ERROR)

# The action's ``comment_status`` output (what became of the sticky comment); every value
# the code writes is one of these, and action.yml, composite/action.yml and the README
# list exactly these (tests/unit/test_output_values.py).
COMMENT_CREATED = "created"
COMMENT_UPDATED = "updated"
COMMENT_SUPERSEDED = "superseded"  # a newer run's report was there: left as it was
COMMENT_FORBIDDEN = "forbidden"  # 403: e.g. a fork's read-only token
COMMENT_RATE_LIMITED = "rate-limited"
COMMENT_FAILED = "failed"
COMMENT_DISABLED = "disabled"  # post_comment: false
COMMENT_DRY_RUN = "dry-run"
COMMENT_NO_TOKEN = "no-token"
COMMENT_NOT_A_PULL_REQUEST = "not-a-pull-request"
# Publish mode only:
COMMENT_REJECTED = "rejected"  # the payload is invalid or not the pull request's
COMMENT_STALE = "stale"  # the pull request has newer commits: its own run will publish
COMMENT_NO_PAYLOAD = "no-payload"
PUBLISH_ONLY_COMMENT_STATUSES = (COMMENT_REJECTED, COMMENT_STALE, COMMENT_NO_PAYLOAD)
COMMENT_STATUSES = (
    COMMENT_CREATED,
    COMMENT_UPDATED,
    COMMENT_SUPERSEDED,
    COMMENT_FORBIDDEN,
    COMMENT_RATE_LIMITED,
    COMMENT_FAILED,
    COMMENT_DISABLED,
    COMMENT_DRY_RUN,
    COMMENT_NO_TOKEN,
    COMMENT_NOT_A_PULL_REQUEST,
    *PUBLISH_ONLY_COMMENT_STATUSES,
)
