"""What users deploy besides the float32 CPU graph: variants and providers (torch-free).

A *variant* is a graph derived from the exported one (``pipeline/variants.py`` builds it);
a *provider* is an onnxruntime execution provider. Each (variant, provider) pair replays
every observed call of a graph against the same torch outputs. The names, the onnxruntime
provider names and the default tolerances live here, once; the command line, the action
settings, the rules and the report all read them from here.
"""

from __future__ import annotations

from collections.abc import Iterable

FLOAT32 = "float32"  # the exported graph itself (the reference row on the CPU)
FP16 = "fp16"  # onnxruntime.transformers.float16, float32 inputs and outputs kept
INT8 = "int8"  # onnxruntime.quantization.quantize_dynamic (weights int8, activations uint8)
OPTIMIZED = "optimized"  # the model onnxruntime saves at ORT_ENABLE_ALL
VARIANTS: tuple[str, ...] = (FP16, INT8, OPTIMIZED)

CPU = "cpu"
# provider flag -> onnxruntime execution provider name
PROVIDERS: dict[str, str] = {
    CPU: "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "dml": "DmlExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}
DEFAULT_PROVIDERS: tuple[str, ...] = (CPU,)
ALL = "all"

# Default tolerances (abs_max, rel_max) per variant, overridable with ``thresholds``
# (``fp16.abs_max=1e-2``). float16 keeps ~3 significant digits, so a float32 graph's
# 1e-3 would flag every fp16 graph; int8 dynamic quantization rounds activations to 256
# levels of their range, so an error of a few percent of the range is what it costs; the
# optimised graph computes the same values with fused kernels: the float32 limits.
# rel is |torch - ort| / (|torch| + 1e-3): an output near 0 inflates it, hence the wide rel.
VARIANT_TOLERANCES: dict[str, tuple[float, float]] = {
    FP16: (1e-2, 1.0),
    INT8: (1e-1, 10.0),
    OPTIMIZED: (1e-3, 1e-2),
}
TOLERANCE_METRICS = ("abs_max", "rel_max")

# Row states
STATE_OK = "ok"
STATE_EXCEEDED = "exceeded tolerance"
STATE_FAILED = "failed"  # conversion, session or run failed
STATE_SKIPPED = "skipped"  # the provider is not in this onnxruntime


def _items(text: str | Iterable[str] | None) -> list[str]:
    if text is None:
        return []
    parts = text.replace(";", ",").replace("\n", ",").split(",") if isinstance(text, str) else text
    return [p.strip().lower() for p in parts if p and p.strip()]


def parse_variants(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"fp16,int8"`` -> ``("fp16", "int8")``; ``all`` is every variant; ``""``/``none``
    is none. Raises ``ValueError`` naming the valid ones for anything else."""
    chosen: list[str] = []
    for item in _items(text):
        if item == "none":
            continue
        names = VARIANTS if item == ALL else (item,)
        for name in names:
            if name not in VARIANTS:
                valid = ", ".join((*VARIANTS, ALL, "none"))
                raise ValueError(f"unknown variant {item!r}; valid: {valid}")
            if name not in chosen:
                chosen.append(name)
    return tuple(v for v in VARIANTS if v in chosen)


def parse_providers(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"cpu,cuda"`` -> ``("cpu", "cuda")`` (default ``cpu``; ``all`` is every known one).
    An unknown name raises ``ValueError``; a known one this onnxruntime lacks is kept (its
    row says it was skipped)."""
    chosen: list[str] = []
    for item in _items(text):
        names = tuple(PROVIDERS) if item == ALL else (item,)
        for name in names:
            if name not in PROVIDERS:
                raise ValueError(
                    f"unknown provider {item!r}; valid: {', '.join((*PROVIDERS, ALL))}"
                )
            if name not in chosen:
                chosen.append(name)
    return tuple(chosen) or DEFAULT_PROVIDERS


def skipped_reason(provider: str, installed: Iterable[str]) -> str:
    """The one text of a provider row that could not run here."""
    return (
        f"skipped: {PROVIDERS.get(provider, provider)} not available in this onnxruntime "
        f"(installed: {', '.join(installed) or 'none'})"
    )
