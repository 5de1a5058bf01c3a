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
# the artifact the workflows upload the head run's reproducer bundles as (never read by a
# publish job: pull-request data, for a maintainer to download and replay)
BUNDLES_ARTIFACT = "observer-ci-bundles"
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

# Why a graph disagrees with torch (issue 19): each is the kind of the model's cause and the
# name of its rule (report/rules.py). Torch does not reproduce its own recorded outputs (the
# exporter is not to blame); the error lies only at positions an attention / padding mask drops.
TORCH_NOT_REPRODUCIBLE = "torch_not_reproducible"
MASKED_POSITIONS_ONLY = "masked_positions_only"
# Op semantics where torch and onnxruntime can both be right and still disagree: the ONNX
# op type of the node where values first part -> the case's key (FirstDivergence.known_case).
# ``Cast`` counts only from a float to an integer type, ``Div`` only on integers
# (pipeline/divergence.py checks the dtypes).
KNOWN_OP_CASES = {
    "TopK": "topk_ties",
    "ArgMax": "argmax_ties",
    "ArgMin": "argmax_ties",
    "NonZero": "nonzero_order",
    "Unique": "nonzero_order",
    "Round": "rounding",
    "Floor": "rounding",
    "Ceil": "rounding",
    "Cast": "rounding",
    "Div": "rounding",
    "Resize": "interpolation",
    "Upsample": "interpolation",
    "GridSample": "interpolation",
    "ScatterND": "scatter_duplicates",
    "ScatterElements": "scatter_duplicates",
}
# Not an op: eager torch ran the diverging module on nested tensors (the fast path of
# nn.TransformerEncoder / MultiheadAttention with a padding mask), zeros at padded positions.
PADDING_FAST_PATH = "padding_fast_path"
# Not an op: the first module parting from torch does so only at positions a mask drops.
MASKED_POSITIONS = "masked_positions"
# What to do about each case (the report's next step).
KNOWN_OP_CASE_NEXT_STEPS = {
    PADDING_FAST_PATH: (
        "eager torch took its padding fast path (nested tensors): padded positions are "
        "zeros in torch and computed in the graph; compare valid positions only, or build "
        "nn.TransformerEncoder with enable_nested_tensor=False (or call "
        "torch.backends.mha.set_fastpath_enabled(False)) so torch computes them too"
    ),
    MASKED_POSITIONS: (
        "the values part only at positions the mask drops (padding, or rows that attend "
        "to nothing): kept positions agree; compare kept positions only, or give padded "
        "positions a defined value in the model (e.g. zero them after attention)"
    ),
    "topk_ties": (
        "tied scores: torch and onnxruntime keep a different index among equal values "
        "(topk/sort/max over ties); break ties in the model (add a tiny index-dependent "
        "offset to the scores) or compare the selected values rather than the indices"
    ),
    "argmax_ties": (
        "tied maxima: argmax/argmin may return any index among equal values; break ties "
        "in the model or compare the values rather than the indices"
    ),
    "nonzero_order": (
        "nonzero/unique: the order (or grouping) of the indices differs between backends; "
        "sort the indices in the model before using them, or compare them as sets"
    ),
    "rounding": (
        "rounding: a float becoming an integer (cast truncates, floor division, round "
        "half to even) falls on the other side of a boundary; round explicitly "
        "(torch.floor/torch.round before .long()) or keep the value in float"
    ),
    "interpolation": (
        "interpolation: the resize mode or coordinate convention differs (align_corners, "
        "nearest rounding, antialias); pass mode and align_corners explicitly to "
        "F.interpolate, or use a mode both sides implement the same (bilinear, "
        "align_corners=False)"
    ),
    "scatter_duplicates": (
        "scatter with repeated indices: which write wins is unspecified; make the indices "
        "unique or use a reduction (scatter_add / index_reduce)"
    ),
}

# Timed runs per call and engine once a call has used its time budget (RunConfig.time_budget_s).
MIN_TIMED_RUNS = 3  # the latency rules compare ORT medians: fewer samples are too noisy
# torch's latency feeds only the report's xtorch column, never a rule: a call slow for its
# budget is timed once, within half the budget (a 600M model: 2 torch runs a call, not 4)
TORCH_MIN_TIMED_RUNS = 1
# A run that takes this share of its call's budget or more is slow (a 600M model's decode
# step, 0.09 s of 1 s): one warm-up is enough, and timing stops as soon as the minimum runs
# agree within TIGHT_SPREAD of their median: more samples of a steady slow call tell the
# latency rules (x1.5, beyond the noise) nothing new. Calls under it (every shipped example,
# under 1 ms) are timed as before.
SLOW_RUN_SHARE = 0.05
TIGHT_SPREAD = 0.1
