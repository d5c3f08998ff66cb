"""Per-condition pieces of
[`icdl.icl.evaluation.evaluate.evaluate_run`][icdl.icl.evaluation.evaluate.evaluate_run]: test prompts, label
diagnostics, the paired bootstrap comparison and the baseline runners (split from
``icdl.icl.evaluation.evaluate``; names are re-exported there)."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from icdl.config import Config
from icdl.errors import InputError
from icdl.icl import metrics
from icdl.icl.baselines import kernel as kernels
from icdl.icl.baselines.blup import BlupBaseline
from icdl.icl.baselines.gd_target import GDTargetBaseline
from icdl.icl.baselines.mlp_tuned import MLPTunedBaseline
from icdl.icl.baselines.simple import (
    AveragingBaseline,
    GDBaseline,
    KNNBaseline,
    LeastSquaresBaseline,
    MLPBaseline,
    ZeroBaseline,
)
from icdl.icl.suites import Condition, Suite
from icdl.icl.tasks import PromptBatch, net_spec, sample_batch
from icdl.icl.training.cost import measure_cost
from icdl.io import portable_path

if TYPE_CHECKING:
    from icdl.icl.baselines.mlp_tuned import MLPTunedBaseline
    from icdl.icl.evaluation.options import EvalOptions

__all__ = [
    "Pred",
    "add_skill",
    "draw_prompts",
    "k_ranges",
    "label_diagnostics",
    "paired_difference",
    "run_baselines",
    "run_cost",
    "run_info",
    "simple_baselines",
    "tuned_baseline",
]

TUNED: tuple[str, ...] = ("ridge_tuned", "kernel", "radial", "blup")
# Baselines whose predictions depend only on the prompts, the condition and the options — never on the
# run — and are costly: memoised in-process, so evaluating several training seeds of one task (same test
# prompts) computes them once (benchmarks and scripts/curves.py evaluate runs in one process).
_MEMO_KINDS: tuple[str, ...] = ("ridge_tuned", "kernel", "radial", "blup", "mlp_tuned", "gd_target")
_MEMO: dict[str, Pred] = {}
_MEMO_MAX = 64  # entries hold predictions only (e.g. 1280 x 46 floats)

# Flags of a degenerate test distribution (docs/protocol.md, pilot findings).
_ZERO_FRACTION = 0.5
_SCALE_RATIO = 10.0

# --------------------------------------------------------------------------------------------------
# Prompts, diagnostics, comparisons
# --------------------------------------------------------------------------------------------------


def draw_prompts(cond: Condition, num: int, seed: int, batch: int = 64) -> PromptBatch:
    """``num`` prompts of a condition, drawn in batches of ``batch`` (batch b = step b of ``seed``)."""
    parts = []
    for b, start in enumerate(range(0, num, batch)):
        parts.append(
            sample_batch(
                cond.task, batch, seed=seed, step=b, points=cond.points, count=min(batch, num - start)
            )
        )
    cat = {
        k: torch.cat([getattr(p, k) for p in parts]) for k in ("xs", "ys", "w", "label_shift", "label_scale")
    }
    return PromptBatch(spec=parts[0].spec, **cat)


def label_diagnostics(ys: Tensor, reference_std: float | None) -> dict[str, Any]:
    """Label statistics of a test set ``ys (B, n, d_y)`` and a degeneracy flag.

    ``zero_fraction``: share of labels exactly 0; ``constant_prompt_fraction``: share of prompts whose
    labels are all equal; ``label_std_ratio``: label std over the training task's (``reference_std``).
    ``degenerate`` when more than half the labels are exactly 0, more than half the prompts are
    constant, or the label scale is off by more than 10x — then R² is dominated by a few prompts and is
    not meaningful (docs/protocol.md, pilot findings: the weight shift N(-0.5, I) of bias-free ReLU targets).
    """
    y = ys.detach().double()
    std = float(y.std()) if y.numel() > 1 else 0.0
    zero = float((y == 0).double().mean())
    flat = y.reshape(y.shape[0], -1)
    const = float((flat.max(1).values == flat.min(1).values).double().mean())
    ratio = std / reference_std if reference_std and reference_std > 0 else None
    reasons = []
    if zero > _ZERO_FRACTION:
        reasons.append(f"{100 * zero:.2f}% of labels are exactly 0")
    if const > _ZERO_FRACTION:
        reasons.append(f"{100 * const:.1f}% of prompts have constant labels")
    if ratio is not None and not (1 / _SCALE_RATIO <= ratio <= _SCALE_RATIO):
        reasons.append(f"label std is {ratio:.3g}x the training task's")
    return {
        "label_mean": float(y.mean()),
        "label_std": std,
        "reference_std": reference_std,
        "label_std_ratio": ratio,
        "zero_fraction": zero,
        "constant_prompt_fraction": const,
        "max_abs_label": float(y.abs().max()),
        "degenerate": bool(reasons),
        "reasons": reasons,
    }


def k_ranges(train_examples: int, max_k: int) -> list[tuple[int, int]]:
    """The k ranges summarised everywhere: ``(1, E)`` within the training length and ``(E+1, K)`` beyond."""
    out = [(1, min(train_examples, max_k))] if max_k >= 1 else []
    if max_k > train_examples:
        out.append((train_examples + 1, max_k))
    return out


def _range_key(r: tuple[int, int]) -> str:
    return f"{r[0]}-{r[1]}"


def paired_difference(
    preds_a: Tensor,
    preds_b: Tensor,
    ys: Tensor,
    ranges: Sequence[tuple[int, int]],
    *,
    pooling: metrics.Pooling = "pooled",
    batch_size: int = 64,
    resamples: int = 1000,
    level: float = 0.9,
    seed: int = 0,
) -> dict[str, Any]:
    """Paired bootstrap of ``Δ(k) = R²_a(k) - R²_b(k)`` on one prompt set ``(B, n, d_y)``.

    Each resample draws prompts (``pooling="pooled"``) or batches (``"batch_mean"``) with replacement —
    the SAME draw for both predictors — and recomputes both R² curves; the band is the percentile
    interval of Δ. Positions where ``preds_b`` is NaN (a baseline evaluated on some k only) are NaN and
    skipped by the range means. Returns ``{"diff", "diff_low", "diff_high", "ranges": {"lo-hi":
    {"mean", "low", "high", "verdict", "k_evaluated", "k_beats", "k_matches", "k_trails"}}}``.
    """
    a = metrics.check_pair(preds_a, ys)[0]
    b, y = metrics.check_pair(preds_b, ys)
    B = y.shape[0]
    g = torch.Generator().manual_seed(seed)
    if pooling == "pooled":
        idx = torch.randint(B, (resamples, B), generator=g)
        C = torch.zeros(resamples, B, dtype=torch.float64).scatter_add_(
            1, idx, torch.ones(resamples, B, dtype=torch.float64)
        )
        yc = y - y.mean(0, keepdim=True)
        s1 = torch.einsum("rb,bnc->rnc", C, yc)
        s2 = C @ (yc**2).sum(-1)
        sst = s2 - (s1**2).sum(-1) / B  # (R, n)
        sse_a, sse_b = C @ ((y - a) ** 2).sum(-1), C @ ((y - b) ** 2).sum(-1)
        boot = (sse_b - sse_a) / sst
        boot = torch.where(sst > 0, boot, torch.full_like(boot, math.nan))
        point = metrics.r2_curve(a, y) - metrics.r2_curve(b, y)
    else:
        units = B // batch_size
        ra = metrics.batch_r2(a, y, batch_size)
        rb = metrics.batch_r2(b, y, batch_size)
        idx = torch.randint(units, (resamples, units), generator=g)
        C = (
            torch.zeros(resamples, units, dtype=torch.float64).scatter_add_(
                1, idx, torch.ones(resamples, units, dtype=torch.float64)
            )
            / units
        )
        boot = C @ (ra - rb)
        point = (ra - rb).mean(0)
    nan_b = b.isnan().any(0).any(-1)  # (n,)
    point = torch.where(nan_b, torch.full_like(point, math.nan), point)
    boot[:, nan_b] = math.nan
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    band = torch.nanquantile(boot, q, dim=0)
    out: dict[str, Any] = {
        "diff": point.tolist(),
        "diff_low": band[0].tolist(),
        "diff_high": band[1].tolist(),
    }
    out["ranges"] = _range_summary(point, boot, band, q, nan_b, ranges)
    return out


def _range_summary(
    point: Tensor,
    boot: Tensor,
    band: Tensor,
    q: Tensor,
    nan_b: Tensor,
    ranges: Sequence[tuple[int, int]],
) -> dict[str, Any]:
    """Mean difference, bootstrap band of the mean and verdict over each k range (finite, evaluated k)."""
    n = point.shape[0]
    summary = {}
    for lo, hi in ranges:
        ks = [k for k in range(lo, hi + 1) if k < n and not bool(nan_b[k]) and bool(point[k].isfinite())]
        if not ks:
            continue
        sel = torch.tensor(ks)
        means = boot[:, sel].nanmean(1)
        low, high = torch.nanquantile(means, q).tolist()
        lows, highs = band[0, sel], band[1, sel]
        summary[_range_key((lo, hi))] = {
            "mean": float(point[sel].mean()),
            "low": low,
            "high": high,
            "verdict": "beats" if low > 0 else ("trails" if high < 0 else "matches"),
            "k_evaluated": len(ks),
            "k_beats": int((lows > 0).sum()),
            "k_trails": int((highs < 0).sum()),
            "k_matches": int(((lows <= 0) & (highs >= 0)).sum()),
        }
    return summary


# --------------------------------------------------------------------------------------------------
# Baselines
# --------------------------------------------------------------------------------------------------


@dataclass
class Pred:
    name: str
    kind: str
    preds: Tensor  # (B_sub, n, d_y) on the first num_prompts prompts
    seconds: float
    meta: dict[str, Any] = field(default_factory=dict)


def _mlp_ks(opts: EvalOptions, train_examples: int, max_k: int) -> list[int]:
    ks = opts.mlp_ks if opts.mlp_ks is not None else (1, 5, 10, train_examples, max_k)
    return sorted({k for k in ks if 1 <= k <= max_k})


def run_baselines(
    names: Sequence[str],
    cond: Condition,
    pb: PromptBatch,
    cfg: Config,
    suite: Suite,
    opts: EvalOptions,
    tick: Callable[[str], None],
) -> list[Pred]:
    """Every requested baseline on the condition's prompts (costly ones on a prefix of the prompts)."""
    xs64, ys64 = pb.xs.double(), pb.ys.double()
    out: list[Pred] = []
    simple = simple_baselines(opts)
    for key in names:
        tick(key)
        t0 = time.perf_counter()
        memo = _memo_key(key, cond, pb, suite, opts) if key in _MEMO_KINDS else None
        if memo is not None and memo in _MEMO:
            out.append(_MEMO[memo])
            continue
        if key in simple:
            bl = simple[key]
            with torch.no_grad():
                p = bl(xs64, ys64)
            out.append(Pred(bl.name, key, p, time.perf_counter() - t0, {"prompts": int(p.shape[0])}))
        elif key == "mlp":
            out += _run_mlp(pb, cfg, suite, opts)
        elif key in TUNED:
            out.append(_run_tuned(key, cond, pb, cfg, suite, opts))
        elif key == "gd":
            out.append(_run_gd(cond, pb, cfg, suite, opts))
        elif key == "gd_target":
            out.append(_run_gd_target(cond, pb, cfg, suite, opts))
        elif key == "mlp_tuned":
            out.append(_run_mlp_tuned(cond, pb, cfg, suite, opts))
        if memo is not None:
            if len(_MEMO) >= _MEMO_MAX:
                _MEMO.pop(next(iter(_MEMO)))
            _MEMO[memo] = out[-1]
    return out


def simple_baselines(opts: EvalOptions) -> dict[str, Any]:
    """The closed-form baselines that need no tuning, by name: ``zero``, ``averaging``, ``least-squares``,
    ``ridge`` (λ = ``opts.ridge``, intercept) and ``knn`` (``opts.knn`` neighbours)."""
    return {
        "zero": ZeroBaseline(),
        "averaging": AveragingBaseline(),
        "least-squares": LeastSquaresBaseline(),
        "ridge": LeastSquaresBaseline(ridge=opts.ridge),
        "knn": KNNBaseline(k_nn=opts.knn),
    }


def tuned_baseline(
    key: str, cond: Condition, cfg: Config, suite: Suite, opts: EvalOptions
) -> kernels.TunedKernelRidge:
    """``ridge_tuned``, ``kernel``, ``radial`` or ``blup`` with λ per k tuned on ``opts.tuned_prompts``
    held-out prompts of the condition (seed ``suite.seed + 1``, never the test prompts). ``kernel``,
    ``radial`` and ``blup`` describe the CONDITION's task (its inputs, weights, standardisation), which
    the held-out prompts come from too."""
    task = cond.task
    base: kernels.TunedKernelRidge
    if key == "ridge_tuned":
        base = kernels.RidgeTunedBaseline()
    elif key == "kernel":
        base = kernels.KernelBaseline.for_task(task)
    elif key == "radial":
        base = kernels.RadialRidgeBaseline.for_task(task)
    else:
        base = BlupBaseline.for_task(task)
    tune = draw_prompts(cond, opts.tuned_prompts, suite.seed + 1)
    with torch.no_grad():
        base.tune(tune.xs.double(), tune.ys.double())
    return base


def _memo_key(key: str, cond: Condition, pb: PromptBatch, suite: Suite, opts: EvalOptions) -> str:
    """Everything a run-independent baseline's predictions depend on: its name, the condition's task and
    points (not its name: suites share conditions), the suite's seed (held-out prompts), the options, and
    the test prompts' bytes."""
    h = hashlib.sha256()
    options = {k: v for k, v in opts.to_dict().items() if k != "baselines"}
    task = cond.task.model_dump(mode="json")
    spec = {"key": key, "task": task, "points": cond.points, "seed": suite.seed, "opts": options}
    h.update(json.dumps(spec, sort_keys=True, default=str).encode())
    for t in (pb.xs, pb.ys):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def tuned_mlp(cond: Condition, cfg: Config, suite: Suite, opts: EvalOptions) -> MLPTunedBaseline:
    """``mlp_tuned`` with its settings chosen per k on ``opts.mlp_tune_prompts`` held-out prompts of the
    condition (seed ``suite.seed + 1``, never the test prompts)."""
    base = MLPTunedBaseline(depth=cfg.task.depth, seed=suite.seed)
    tune = draw_prompts(cond, opts.mlp_tune_prompts, suite.seed + 1)
    base.tune(tune.xs, tune.ys)
    return base


def _run_mlp_tuned(cond: Condition, pb: PromptBatch, cfg: Config, suite: Suite, opts: EvalOptions) -> Pred:
    """``mlp_tuned`` ([`icdl.icl.baselines.mlp_tuned`][icdl.icl.baselines.mlp_tuned]) on the first
    ``mlp_tuned_prompts`` test prompts, its settings chosen per k on ``mlp_tune_prompts`` held-out prompts
    (seed ``suite.seed + 1``)."""
    t0 = time.perf_counter()
    m = min(opts.mlp_tuned_prompts, pb.xs.shape[0])
    base = tuned_mlp(cond, cfg, suite, opts)
    p = base(pb.xs[:m], pb.ys[:m])
    settings = [None if s is None else s.to_dict() for s in base.settings or []]
    meta = {
        "prompts": m, "tune_prompts": opts.mlp_tune_prompts, "tune_seed": suite.seed + 1,
        "depth": cfg.task.depth, "init": "He normal hidden, zero output", "optimizer": "full-batch AdamW",
        "settings": settings,
        "tuning": base.tuning, "fallbacks": base.fallbacks,
    }  # fmt: skip
    return Pred(base.name, "mlp_tuned", p, time.perf_counter() - t0, meta)


def _run_mlp(pb: PromptBatch, cfg: Config, suite: Suite, opts: EvalOptions) -> list[Pred]:
    """The paper's MLP baseline on the first ``mlp_prompts`` prompts at a few k: best and last epoch."""
    t0 = time.perf_counter()
    n = pb.xs.shape[1]
    m = min(opts.mlp_prompts, pb.xs.shape[0])
    ks = _mlp_ks(opts, suite.train_examples, n - 1)
    mlp = MLPBaseline(
        depth=cfg.task.depth,
        width=opts.mlp_width,
        lr=opts.mlp_lr,
        epochs=opts.mlp_epochs,
        seed=suite.seed,
        ks=ks,
        pooling=opts.pooling,
    )
    tr = mlp.trace(pb.xs[:m], pb.ys[:m])
    secs = time.perf_counter() - t0
    best, epochs = tr.best(pb.ys[:m], pooling=opts.pooling)
    meta: dict[str, Any] = {
        "prompts": m,
        "ks": ks,
        "width": opts.mlp_width,
        "depth": cfg.task.depth,
        "epochs": opts.mlp_epochs,
        "lr": opts.mlp_lr,
        "bias": True,
        "init": "He normal",
        "note": f"evaluated on the first {m} prompts at k in {ks} only (cost)",
    }
    base = f"mlp{cfg.task.depth}x{opts.mlp_width}"
    return [
        Pred(
            f"{base}_best",
            "mlp-best",
            best,
            secs,
            {**meta, "selection": "best (oracle epoch per k)", "best_epoch": epochs},
        ),
        Pred(f"{base}_last", "mlp-last", tr.last(), secs, {**meta, "selection": "last epoch"}),
    ]


def _run_gd(cond: Condition, pb: PromptBatch, cfg: Config, suite: Suite, opts: EvalOptions) -> Pred:
    """GD on the target architecture, step size tuned on held-out prompts (seed ``suite.seed + 1``)."""
    t0 = time.perf_counter()
    m = min(opts.gd_prompts, pb.xs.shape[0])
    gd = GDBaseline(net_spec(cfg.task), steps=opts.gd_steps, seed=suite.seed)
    tune = draw_prompts(cond, opts.gd_tune_prompts, suite.seed + 1)  # held-out prompts
    meta: dict[str, Any] = {
        "prompts": m,
        "steps": opts.gd_steps,
        "tune_prompts": opts.gd_tune_prompts,
        "tune_seed": suite.seed + 1,
    }
    try:
        with torch.no_grad():
            gd.tune_step_size(tune.xs, tune.ys, opts.gd_grid, pooling="pooled")
            p = gd(pb.xs[:m], pb.ys[:m])
        meta.update({"lr": gd.lr, "tuning": gd.tuning})
    except InputError as exc:  # every step size diverged: record it, do not fail the suite
        p = torch.full_like(pb.ys[:m], math.nan)
        meta["error"] = str(exc)
    return Pred(gd.name, "gd", p, time.perf_counter() - t0, meta)


def _run_gd_target(cond: Condition, pb: PromptBatch, cfg: Config, suite: Suite, opts: EvalOptions) -> Pred:
    """gd_target ([`icdl.icl.baselines.gd_target`][icdl.icl.baselines.gd_target]) on the first ``gd_prompts``
    prompts, ``(lr, steps)`` tuned on ``gd_tune_prompts`` held-out prompts (seed ``suite.seed + 1``)."""
    t0 = time.perf_counter()
    m = min(opts.gd_prompts, pb.xs.shape[0])
    gd = GDTargetBaseline(net_spec(cfg.task), seed=suite.seed)
    tune = draw_prompts(cond, opts.gd_tune_prompts, suite.seed + 1)
    meta: dict[str, Any] = {"prompts": m, "tune_prompts": opts.gd_tune_prompts, "tune_seed": suite.seed + 1}
    try:
        gd.tune(tune.xs.double(), tune.ys.double())
        with torch.no_grad():
            p = gd(pb.xs[:m].double(), pb.ys[:m].double())
        meta.update({"lr": gd.lr, "steps": gd.steps, "init_std": gd.init_std, "tuning": gd.tuning})
        meta["fallbacks"] = gd.fallbacks  # blown-up predictions replaced by the start's (gd_target guard)
    except InputError as exc:  # every pair diverged: record it, do not fail the suite
        p = torch.full_like(pb.ys[:m], math.nan, dtype=torch.float64)
        meta["error"] = str(exc)
    return Pred(gd.name, "gd_target", p, time.perf_counter() - t0, meta)


def _run_tuned(
    key: str, cond: Condition, pb: PromptBatch, cfg: Config, suite: Suite, opts: EvalOptions
) -> Pred:
    """``ridge_tuned``, ``kernel``, ``radial`` or ``blup``: λ per k tuned on ``opts.tuned_prompts`` held-out
    prompts of the condition (seed ``suite.seed + 1``, never the test prompts), then predicted on all test
    prompts."""
    t0 = time.perf_counter()
    base = tuned_baseline(key, cond, cfg, suite, opts)
    with torch.no_grad():
        p = base(pb.xs.double(), pb.ys.double())
    meta = {
        "prompts": int(p.shape[0]),
        "tune_prompts": opts.tuned_prompts,
        "tune_seed": suite.seed + 1,
        "lam": base.lam,
        "grid": list(base.lambdas),
        "refine": base.refine,
        "edge": (base.tuning or {}).get("edge"),
    }
    moment = getattr(base, "moment", None)
    if moment is not None:
        meta["moment"] = moment.cost()
    return Pred(base.name, key, p, time.perf_counter() - t0, meta)


def add_skill(curves: dict[str, Any], preds: list[Pred], ys: Tensor, ranges: list[tuple[int, int]]) -> None:
    """Nonlinear skill of every predictor against ``ridge_tuned`` (when present) on the same prompts."""
    lin = next((p for p in preds if p.kind == "ridge_tuned"), None)
    if lin is None:
        return
    for p in preds:
        m = p.preds.shape[0]
        skill = metrics.nonlinear_skill(p.preds.double(), lin.preds[:m].double(), ys[:m].double())
        curves[p.name]["skill"] = skill.tolist()
        curves[p.name]["skill_ranges"] = {
            _range_key(r): float(skill[r[0] : r[1] + 1].nanmean()) for r in ranges if r[0] < len(skill)
        }


def run_cost(model: Any, cfg: Config, opts: EvalOptions, max_k: int, seed: int) -> dict[str, Any]:
    """One ICL forward pass vs training the baseline MLP (``icdl.icl.training.cost.measure_cost``)."""
    return measure_cost(
        model,
        cfg,
        points=min(max_k + 1, cfg.model.max_points),
        prompts=opts.batch,
        mlp_width=opts.mlp_width,
        mlp_epochs=opts.mlp_epochs,
        mlp_lr=opts.mlp_lr,
        seed=seed,
    )


def run_info(run_dir: str | Path, cfg: Config) -> dict[str, Any]:
    """The ``run`` block of a result: what was trained, on what."""
    return {
        "run_dir": portable_path(run_dir),
        "name": cfg.name,
        "attention": cfg.model.attention,
        "layers": cfg.model.layers,
        "target_depth": cfg.task.depth,
        "train_examples": cfg.task.examples,
        "train_seed": cfg.train.seed,
    }
