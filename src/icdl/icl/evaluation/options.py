"""What an evaluation runs with: the baselines it knows (`BASELINES`,
each suite's default in `SUITE_BASELINES`), their settings
([`EvalOptions`][icdl.icl.evaluation.options.EvalOptions], all recorded in the results) and the parser of
``--baselines`` ([`parse_baselines`][icdl.icl.evaluation.options.parse_baselines]). Below
[`evaluate`][icdl.icl.evaluation.evaluate] and [`baseline_runs`][icdl.icl.evaluation.baseline_runs], which
both read them; re-exported by ``evaluate``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from icdl.errors import InputError
from icdl.icl import metrics

__all__ = [
    "BASELINES",
    "GD_GRID",
    "OPTIONAL_BASELINES",
    "POOLINGS",
    "SUITE_BASELINES",
    "EvalOptions",
    "parse_baselines",
]

BASELINES: tuple[str, ...] = (
    "zero", "averaging", "least-squares", "ridge", "knn", "mlp", "gd", "ridge_tuned", "kernel", "radial",
    "blup", "mlp_tuned",
)  # fmt: skip
# Slow, only on request (not in "all"): GD on the target with (lr, steps) tuned on held-out prompts.
OPTIONAL_BASELINES: tuple[str, ...] = ("gd_target",)
_CHEAP = ("zero", "averaging", "least-squares", "ridge", "knn")
_DEFAULT = tuple(b for b in BASELINES if b not in ("mlp_tuned", "blup"))  # minutes: in "all", not default
SUITE_BASELINES: dict[str, tuple[str, ...]] = {
    # The paper shows its NN baseline on in-distribution prompts (F.1) and on each weight shift (F.2).
    "in-distribution": _DEFAULT,
    "mixture": _CHEAP,
    "mixture-prompt": _CHEAP,
    "weight-shift": (*_CHEAP, "mlp"),
    "weight-shift-std": (*_CHEAP, "mlp"),
    "long-prompts": _CHEAP,
    "centred": _DEFAULT,
    "depth": ("averaging",),
}
GD_GRID: tuple[float, ...] = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
POOLINGS: tuple[str, ...] = ("pooled", "batch_mean")


@dataclass(frozen=True)
class EvalOptions:
    """Settings of an evaluation (all recorded in the results).

    ``baselines=None`` uses the suite's default (`SUITE_BASELINES`). ``loops``: a looped model's
    test-time loop counts, each evaluated as the predictor ``icl_loops{L}`` (kind ``loops``) next to
    the model at its trained count. ``mlp_ks=None`` evaluates the
    MLP at k in {1, 5, 10, E, K} (E = training examples, K = longest test k); ``mlp_prompts`` /
    ``gd_prompts`` evaluate those baselines on the first prompts only (their bands are wider).
    """

    baselines: tuple[str, ...] | None = None
    pooling: metrics.Pooling = "pooled"
    resamples: int = 1000
    level: float = 0.9
    ridge: float = 1.0
    knn: int = 3
    mlp_width: int = 200
    mlp_epochs: int = 100
    mlp_lr: float = 5e-3
    mlp_prompts: int = 64
    mlp_ks: tuple[int, ...] | None = None
    gd_steps: int = 10
    gd_prompts: int = 128
    gd_tune_prompts: int = 32
    gd_grid: tuple[float, ...] = GD_GRID
    tuned_prompts: int = 640
    mlp_tuned_prompts: int = 320
    mlp_tune_prompts: int = 128
    batch: int = 64
    cost: bool = True
    loops: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        """Validate every field (the CLI's options are checked here, not repeated there)."""
        lows = {
            "resamples": 10, "knn": 1, "mlp_width": 1, "mlp_epochs": 1, "mlp_prompts": 2, "gd_steps": 1,
            "gd_prompts": 2, "gd_tune_prompts": 1, "tuned_prompts": 2, "batch": 1, "mlp_tuned_prompts": 2,
            "mlp_tune_prompts": 2,
        }  # fmt: skip
        for name, low in lows.items():
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise InputError(f"{name.replace('_', '-')} must be an integer >= {low}, got {v!r}")
        for name in ("mlp_lr", "ridge"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise InputError(f"{name.replace('_', '-')} must be a finite number > 0, got {v!r}")
        if not (isinstance(self.level, float) and 0 < self.level < 1):
            raise InputError(f"level must be in (0, 1), got {self.level!r}")
        if self.pooling not in POOLINGS:
            raise InputError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.mlp_ks is not None and (not self.mlp_ks or min(self.mlp_ks) < 1):
            raise InputError("mlp-ks values must be integers >= 1")
        if not self.gd_grid or not all(math.isfinite(g) and g > 0 for g in self.gd_grid):
            raise InputError("gd_grid must hold finite step sizes > 0")
        if self.baselines is not None:
            parse_baselines(self.baselines)

        def count(v: object) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 1

        if self.loops is not None and (not self.loops or not all(count(v) for v in self.loops)):
            raise InputError(f"loops must be integers >= 1, got {self.loops!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("baselines", "mlp_ks", "gd_grid", "loops"):
            d[key] = None if d[key] is None else list(d[key])
        return d


def parse_baselines(spec: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """``"averaging,mlp"`` -> ``("averaging", "mlp")``; ``"all"`` -> every baseline, ``"none"`` -> ``()``,
    ``None`` / ``"default"`` -> None (the suite's default). Unknown names are an InputError."""
    if spec is None:
        return None
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if items == ["default"]:
        return None
    if items == ["all"]:
        return BASELINES
    if items in (["none"], []):
        return ()
    aliases = {
        "least_squares": "least-squares", "ls": "least-squares", "nn": "mlp", "lstsq": "least-squares",
        "ridge-tuned": "ridge_tuned",
    }  # fmt: skip
    out = []
    for s in items:
        s = aliases.get(s, s)
        if s not in BASELINES + OPTIONAL_BASELINES:
            known = ", ".join(BASELINES + OPTIONAL_BASELINES)
            raise InputError(f"unknown baseline {s!r}; choose from {known}, all, none")
        if s not in out:
            out.append(s)
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# Run directory, checkpoint and cache
# --------------------------------------------------------------------------------------------------
