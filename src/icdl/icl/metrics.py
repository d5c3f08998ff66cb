"""R²(k) and MSE(k) curves across prompts, with seeded, vectorised bootstrap bands.

Every ICL model and baseline predicts at every prefix: ``preds[:, k]`` is the prediction for the query
``x_k`` after the ``k`` in-context examples ``(x_0, y_0), ..., (x_{k-1}, y_{k-1})``. A *curve* is one
number per ``k = 0 .. n-1``, computed **across prompts** at that ``k`` (one prediction per prompt and
position cannot give an R² on its own; docs/protocol.md, metric).

Conventions (documented defaults; docs/protocol.md, metric; docs/protocol.md, open choices item 3):

* ``pooling="pooled"`` (default): over all ``B`` prompts at once,
  ``R²(k) = 1 - Σ_b Σ_c (y_bkc - ŷ_bkc)² / Σ_b Σ_c (y_bkc - ȳ_kc)²`` with ``ȳ_kc`` the mean over prompts
  of coordinate ``c`` at position ``k``. For ``d_y > 1`` this is R² on the pooled coordinates: errors
  and total variation are summed over coordinates before the ratio (not an average of per-coordinate R²).
* ``pooling="batch_mean"``: split the prompts, in order, into consecutive batches of ``batch_size``
  (64, the paper's evaluation batch: 100 batches x 64 = 6,400 prompts), compute the pooled R² inside each
  batch and average over batches. ``B`` must be a multiple of ``batch_size``.
* ``MSE(k) = (1 / (B d_y)) Σ_b Σ_c (y_bkc - ŷ_bkc)²`` (mean over prompts and coordinates).
* bands: percentile bootstrap with ``resamples`` (default 1,000) draws of the *units* with replacement
  — prompts for ``"pooled"``, batches for ``"batch_mean"`` — from a seeded generator; the band is the
  ``((1 - level) / 2, (1 + level) / 2)`` quantiles (default ``level = 0.9``: 5 % and 95 %, as in Garg et al.'s
  ``aggregate_metrics``). All resamples are evaluated at once through a count matrix ``(resamples, units)``.
* a position where every prompt has the same label (zero total variation) has R² = NaN; a position whose
  predictions contain NaN (e.g. a baseline evaluated only on a subset of ``k``) has NaN for everything.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.io import atomic_write_json, read_json

__all__ = [
    "Pooling",
    "R2Curve",
    "batch_r2",
    "bootstrap_bands",
    "check_pair",
    "evaluate",
    "mean_over_k",
    "mse_curve",
    "nonlinear_skill",
    "r2_curve",
]

Pooling = Literal["pooled", "batch_mean"]
POOLINGS: tuple[str, ...] = ("pooled", "batch_mean")


def _as_3d(name: str, t: Tensor) -> Tensor:
    if not isinstance(t, Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() == 2:
        t = t.unsqueeze(-1)
    if t.dim() != 3:
        raise InputError(f"{name} must have shape (B, n) or (B, n, d_y), got {tuple(t.shape)}")
    return t


def check_pair(preds: Tensor, ys: Tensor) -> tuple[Tensor, Tensor]:
    """Validate and promote to float64 (sums over thousands of prompts)."""
    preds, ys = _as_3d("preds", preds), _as_3d("ys", ys)
    if preds.shape != ys.shape:
        raise InputError(f"preds {tuple(preds.shape)} and ys {tuple(ys.shape)} must have the same shape")
    if ys.shape[0] < 2:
        raise InputError(f"R² across prompts needs at least 2 prompts, got {ys.shape[0]}")
    return preds.detach().to(torch.float64), ys.detach().to(torch.float64)


def _check_pooling(pooling: str, batch_size: int, num_prompts: int) -> None:
    if pooling not in POOLINGS:
        raise InputError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    if pooling == "batch_mean":
        if not isinstance(batch_size, int) or batch_size < 2:
            raise InputError(f"batch_size must be an integer >= 2, got {batch_size!r}")
        if num_prompts % batch_size:
            raise InputError(
                f"pooling 'batch_mean' needs a multiple of batch_size={batch_size} prompts, got {num_prompts}"
            )


def _unit_stats(preds: Tensor, ys: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-prompt sufficient statistics: SSE ``(B, n)``, centred labels ``(B, n, d_y)``, Σ_c y_c² ``(B, n)``.

    Labels are centred at the overall per-position mean: SST is shift invariant, and centring avoids
    cancellation in ``Σ y² - |Σ y|² / m`` when labels sit far from 0. SSE uses the raw values.
    """
    sse = ((ys - preds) ** 2).sum(-1)
    yc = ys - ys.mean(0, keepdim=True)
    return sse, yc, (yc**2).sum(-1)


def _r2_from_sums(sse: Tensor, s1: Tensor, s2: Tensor, m: float | Tensor) -> Tensor:
    """``1 - SSE / (Σ y² - |Σ y|² / m)`` with ``s1`` of shape (..., n, d_y)."""
    sst = s2 - (s1**2).sum(-1) / m
    r2 = 1 - sse / sst
    return torch.where(sst > 0, r2, torch.full_like(r2, math.nan))


def batch_r2(preds: Tensor, ys: Tensor, batch_size: int) -> Tensor:
    """Pooled R² inside each consecutive batch: ``(B / batch_size, n)``."""
    B, n, d = ys.shape
    pb = preds.reshape(B // batch_size, batch_size, n, d)
    yb = ys.reshape(B // batch_size, batch_size, n, d)
    sse = ((yb - pb) ** 2).sum((1, 3))
    yc = yb - yb.mean(1, keepdim=True)
    sst = (yc**2).sum((1, 3))
    r2 = 1 - sse / sst
    return torch.where(sst > 0, r2, torch.full_like(r2, math.nan))


def r2_curve(preds: Tensor, ys: Tensor, *, pooling: Pooling = "pooled", batch_size: int = 64) -> Tensor:
    """R²(k) across prompts for every position k.

    Args:
        preds: ``(B, n)`` or ``(B, n, d_y)`` predictions; ``preds[:, k]`` follows k in-context examples.
        ys: same shape, the true labels.
        pooling: ``"pooled"`` over all prompts (default) or ``"batch_mean"`` over batches of ``batch_size``.

    Returns:
        ``(n,)`` float64 tensor (NaN where the labels have no variation across prompts).
    """
    preds, ys = check_pair(preds, ys)
    _check_pooling(pooling, batch_size, ys.shape[0])
    if pooling == "batch_mean":
        return batch_r2(preds, ys, batch_size).mean(0)
    sse, yc, _ = _unit_stats(preds, ys)
    sst = (yc**2).sum((0, 2))
    r2 = 1 - sse.sum(0) / sst
    return torch.where(sst > 0, r2, torch.full_like(r2, math.nan))


def mse_curve(preds: Tensor, ys: Tensor) -> Tensor:
    """``MSE(k)``: mean over prompts and output coordinates of the squared error, ``(n,)`` float64."""
    preds, ys = check_pair(preds, ys)
    return ((ys - preds) ** 2).mean((0, 2))


def nonlinear_skill(preds: Tensor, linear_preds: Tensor, ys: Tensor) -> Tensor:
    """Nonlinear skill per k: ``1 - MSE_pred(k) / MSE_lin(k)``, ``(n,)`` float64 (docs/baselines.md).

    ``linear_preds`` are the best linear predictor's (``ridge_tuned``,
    [`icdl.icl.baselines.kernel`][icdl.icl.baselines.kernel]) on the SAME prompts. The skill is the share of
    the variance left by the best linear predictor that ``preds``
    explains: 0 = no better than tuned ridge, 1 = perfect, negative = worse than tuned ridge. NaN where
    either prediction is NaN (a baseline not evaluated at that k) or ``MSE_lin(k) = 0``.
    """
    mse = mse_curve(preds, ys)
    lin = mse_curve(linear_preds, ys)
    ok = lin > 0
    return torch.where(
        ok, 1 - mse / torch.where(ok, lin, torch.ones_like(lin)), torch.full_like(lin, math.nan)
    )


def _counts(units: int, resamples: int, seed: int, device: torch.device) -> Tensor:
    """``(resamples, units)`` float64 multiplicities of a with-replacement resample of the units."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    idx = torch.randint(units, (resamples, units), generator=g)
    counts = torch.zeros(resamples, units, dtype=torch.float64)
    counts.scatter_add_(1, idx, torch.ones(resamples, units, dtype=torch.float64))
    return counts.to(device)


def bootstrap_bands(
    preds: Tensor,
    ys: Tensor,
    *,
    pooling: Pooling = "pooled",
    batch_size: int = 64,
    resamples: int = 1000,
    level: float = 0.9,
    seed: int = 0,
) -> dict[str, Tensor]:
    """Percentile-bootstrap bands of R²(k) and MSE(k), resampling prompts (or batches) with replacement.

    Vectorised: one ``(resamples, units)`` count matrix (from a seeded index tensor) turns every resample
    into a weighted sum, so no loop over resamples or prompts. Returns ``{"r2_low", "r2_high",
    "mse_low", "mse_high"}``, each ``(n,)`` float64. Resamples with zero label variation give NaN R² and
    are ignored by the quantiles (``nanquantile``).
    """
    preds, ys = check_pair(preds, ys)
    _check_pooling(pooling, batch_size, ys.shape[0])
    if not isinstance(resamples, int) or resamples < 1:
        raise InputError(f"resamples must be an integer >= 1, got {resamples!r}")
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), got {level!r}")
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64, device=ys.device)
    B, n, d = ys.shape
    if pooling == "pooled":
        C = _counts(B, resamples, seed, ys.device)  # (R, B)
        sse, yc, y2 = _unit_stats(preds, ys)
        sse_r = C @ sse  # (R, n)
        s1 = torch.einsum("rb,bnc->rnc", C, yc)
        s2 = C @ y2
        r2 = _r2_from_sums(sse_r, s1, s2, float(B))
        mse = sse_r / (B * d)
    else:
        units = B // batch_size
        C = _counts(units, resamples, seed, ys.device) / units  # (R, U) weights summing to 1
        r2 = C @ batch_r2(preds, ys, batch_size)
        mse_b = ((ys - preds) ** 2).mean(-1).reshape(units, batch_size, n).mean(1)
        mse = C @ mse_b
    r2_q = torch.nanquantile(r2, q, dim=0)
    mse_q = torch.nanquantile(mse, q, dim=0)
    return {"r2_low": r2_q[0], "r2_high": r2_q[1], "mse_low": mse_q[0], "mse_high": mse_q[1]}


def _floats(t: Tensor | list[float]) -> list[float | None]:
    vals = t.tolist() if isinstance(t, Tensor) else list(t)
    return [None if v is None or not math.isfinite(v) else float(v) for v in vals]


def _unfloats(vals: list[float | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in vals]


@dataclass
class R2Curve:
    """R²(k) and MSE(k) for one predictor on one prompt set, with bootstrap bands.

    Lists are indexed by ``k = 0 .. n-1`` (``k[i] == i``); NaN marks positions that were not evaluated or
    have no label variation. ``meta`` holds anything else worth caching (baseline settings, chosen epochs,
    tuned step size...). ``to_dict`` gives JSON-ready values (NaN -> ``None``).
    """

    name: str
    r2: list[float]
    r2_low: list[float]
    r2_high: list[float]
    mse: list[float]
    mse_low: list[float]
    mse_high: list[float]
    num_prompts: int
    pooling: str = "pooled"
    batch_size: int = 64
    level: float = 0.9
    resamples: int = 1000
    seed: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    CURVES = ("r2", "r2_low", "r2_high", "mse", "mse_low", "mse_high")

    @property
    def k(self) -> list[int]:
        return list(range(len(self.r2)))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in self.CURVES:
            d[key] = _floats(d[key])
        d["k"] = self.k
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> R2Curve:
        d = dict(d)
        d.pop("k", None)
        unknown = set(d) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise InputError(f"unknown R2Curve fields: {', '.join(sorted(unknown))}")
        for key in cls.CURVES:
            d[key] = _unfloats(d[key])
        return cls(**d)

    def save(self, path: str | Path) -> None:
        """Write JSON atomically (temp file in the same folder, then rename;
        [`icdl.io.atomic_write`][icdl.io.atomic_write])."""
        atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> R2Curve:
        """Read a curve written by `save` (a damaged file is one InputError line naming it)."""
        data = read_json(path, what="R² curve")
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(f"R² curve {str(path)!r} is incomplete ({exc!r})") from None

    def mean(self, k_lo: int, k_hi: int) -> float:
        """Mean R² over ``k_lo <= k <= k_hi`` (the paper's "mean 1-50" summaries)."""
        return mean_over_k(self.r2, k_lo, k_hi)


def mean_over_k(r2: list[float] | Tensor, k_lo: int, k_hi: int) -> float:
    """Mean of a curve over ``k_lo..k_hi`` inclusive, skipping NaN entries (NaN if none left)."""
    vals = torch.as_tensor(r2, dtype=torch.float64)
    if not 0 <= k_lo <= k_hi < len(vals):
        raise InputError(f"need 0 <= k_lo <= k_hi < {len(vals)}, got {k_lo}, {k_hi}")
    part = vals[k_lo : k_hi + 1]
    part = part[~part.isnan()]
    return float(part.mean()) if len(part) else math.nan


def evaluate(
    name: str,
    preds: Tensor,
    ys: Tensor,
    *,
    pooling: Pooling = "pooled",
    batch_size: int = 64,
    resamples: int = 1000,
    level: float = 0.9,
    seed: int = 0,
    meta: dict[str, Any] | None = None,
) -> R2Curve:
    """R²(k), MSE(k) and their bootstrap bands for predictions ``(B, n[, d_y])`` against labels."""
    r2 = r2_curve(preds, ys, pooling=pooling, batch_size=batch_size)
    bands = bootstrap_bands(
        preds, ys, pooling=pooling, batch_size=batch_size, resamples=resamples, level=level, seed=seed
    )
    return R2Curve(
        name=name,
        r2=r2.tolist(),
        r2_low=bands["r2_low"].tolist(),
        r2_high=bands["r2_high"].tolist(),
        mse=mse_curve(preds, ys).tolist(),
        mse_low=bands["mse_low"].tolist(),
        mse_high=bands["mse_high"].tolist(),
        num_prompts=int(_as_3d("ys", ys).shape[0]),
        pooling=pooling,
        batch_size=batch_size,
        level=level,
        resamples=resamples,
        seed=seed,
        meta=dict(meta or {}),
    )
