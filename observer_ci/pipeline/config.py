"""What the child's checks are configured with (tolerances, timing, cache)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from observer_ci.core.constants import FEEDS_MAX_BYTES
from observer_ci.core.variants import DEFAULT_PROVIDERS, FLOAT32, VARIANT_TOLERANCES
from observer_ci.pipeline.export_cache import DEFAULT_CACHE_MAX_MB, MB
from observer_ci.report.rules import Thresholds

Progress = Callable[[str], None]


@dataclass
class RunConfig:
    """Tolerances and timing of the checks. The tolerances are the ``abs_max`` and
    ``rel_max`` thresholds: one set decides SUCCESS and the ``discrepancy`` rule."""

    atol: float = Thresholds.abs_max
    rtol: float = Thresholds.rel_max
    hist: tuple[float, ...] = (0.1, 0.01)
    warmup: int = 2
    repeat: int = 10
    probe: bool = True
    cache_dir: str | None = None  # export cache shared by runs (None: no cache)
    cache_max_bytes: int | None = DEFAULT_CACHE_MAX_MB * MB  # its size cap (None: no cap)
    threads: int | None = None  # onnxruntime intra-op threads (None: its default)
    save_feeds: bool = False  # save the onnxruntime inputs for paired base/head timing
    merge_decoders: bool = True  # decoder_model_merged.onnx when a decoder has two families
    feeds_max_bytes: int = FEEDS_MAX_BYTES  # all saved inputs of the run together
    variants: tuple[str, ...] = ()  # core.variants: fp16, int8, optimized (pipeline/variants.py)
    providers: tuple[str, ...] = DEFAULT_PROVIDERS  # core.variants.PROVIDERS keys
    variant_tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)  # overrides

    def variant_limits(self, variant: str) -> tuple[float, float]:
        """``(abs_max, rel_max)`` of a variant: float32 is the graph's own tolerances."""
        if variant == FLOAT32:
            return self.atol, self.rtol
        return self.variant_tolerances.get(variant, VARIANT_TOLERANCES[variant])

    def recorded(self) -> dict[str, object]:
        """What ``results.json`` records under ``settings``."""
        return {
            "abs_max": self.atol,
            "rel_max": self.rtol,
            "hist": list(self.hist),
            "warmup": self.warmup,
            "repeat": self.repeat,
            "probe": self.probe,
            **({"variants": list(self.variants)} if self.variants else {}),
            **({"providers": list(self.providers)} if self.providers != DEFAULT_PROVIDERS else {}),
        }
