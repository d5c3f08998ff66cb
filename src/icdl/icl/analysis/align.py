"""Which algorithm does the trained transformer run? Its agreement with baselines, GD and a compiled model.

``align_run(run_dir)`` loads a run's newest checkpoint, draws in-distribution test prompts (the
[`icdl.icl.suites`][icdl.icl.suites] test stream, as [`icdl
evaluate`][icdl.icl.evaluation.evaluate.evaluate_run]), and for every k in ``ks`` compares the ICL model's
prediction ``ŷ_ICL`` for the query after k examples with that of each other predictor ``ŷ_P`` on the same
prompts:

* ``r2``: R² of ``ŷ_P`` as a prediction of ``ŷ_ICL`` (ICL is the target), ``1 - Σ (ŷ_ICL - ŷ_P)² / Σ (ŷ_ICL -
  mean ŷ_ICL)²`` over prompts — 1 when the predictions coincide, 0 when ``ŷ_P`` explains none of ICL's
  variation across prompts;
* ``corr``: the Pearson correlation of the two predictions across prompts (``r2`` without the charge for
  a different scale or offset);
* ``cos_y`` / ``cos_x``: the cosine between the two predictors' sensitivities ``d ŷ / d y_i`` (the k context
  labels) and ``d ŷ / d x_query``, per prompt by autograd
  ([`icdl.icl.analysis.sensitivity`][icdl.icl.analysis.sensitivity]), averaged over prompts (prompts where
  either gradient is zero are left out; their count is kept). The two "model sensitivity" comparisons of von
  Oswald et al. (2023, Sec. 3). At k = 1 ``cos_y`` compares two scalars (±1).

Predictors: the baselines named in ``baselines``
([`ALIGN_BASELINES`][icdl.icl.analysis.align.ALIGN_BASELINES]; the tuned ones are tuned on held-out prompts,
[`icdl.icl.evaluation.baseline_runs.tuned_baseline`][icdl.icl.evaluation.baseline_runs.tuned_baseline];
[`register_baseline`][icdl.icl.analysis.align.register_baseline] adds one by name), and L-step GD on the
target architecture ([`gd_predictions`][icdl.icl.analysis.sensitivity.gd_predictions]) for every ``(lr, L,
init)`` of the grid, from a seeded ``w0 ~ init · He`` shared by all prompts. Finally the GD grid point that
agrees best with ICL (mean R² over ks, among L <= ``compiled_max_steps``) is COMPILED into a transformer of
the target architecture (``compile_gd_transformer``, exact ``compiled_variant``, one model per k since its
weights depend on n) and measured the same way, against ICL and against the GD point it compiles: the latter
must be ~1 (R² and cosines), a built-in check that the measurements see an algorithm when one is there.

Results: ``RUN_DIR/align/align.json`` (atomic), see [`align_run`][icdl.icl.analysis.align.align_run].
"""

from __future__ import annotations

import datetime as _dt
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from icdl.budget import CPU_FLOPS, Estimate
from icdl.config import Config
from icdl.construct import compile_gd_transformer
from icdl.construct.estimate import construction_estimate
from icdl.construct.variants.registry import get_variant
from icdl.errors import InputError
from icdl.icl.analysis import sensitivity as sens
from icdl.icl.baselines.blup import DEFAULT_TARGETS as BLUP_TARGETS
from icdl.icl.baselines.kernel import DEFAULT_LAMBDAS
from icdl.icl.baselines.simple import GDBaseline
from icdl.icl.evaluation.baseline_runs import (
    draw_prompts,
    k_ranges,
    simple_baselines,
    tuned_baseline,
    tuned_mlp,
)
from icdl.icl.evaluation.evaluate import EvalOptions, checkpoint_info
from icdl.icl.suites import EVAL_SEED, Condition, Suite, build_suite, eval_points
from icdl.icl.tasks import PromptBatch, net_spec
from icdl.icl.training.train import load_run
from icdl.io import atomic_write_json, clean_json, portable_path

__all__ = [
    "ALIGN_BASELINES",
    "BAND_EDGES",
    "FORMAT",
    "AlignOptions",
    "add_bands",
    "agreement_r2",
    "align_estimate",
    "align_run",
    "closest_per_band",
    "correlation",
    "default_ks",
    "gd_name",
    "k_bands",
    "mean_cosine",
    "register_baseline",
    "result_path",
]

FORMAT = "icdl-align-v1"


@dataclass(frozen=True)
class BaselineContext:
    """What a baseline factory may use: the run's config, the test suite and condition (for held-out
    tuning prompts) and evaluation options (``tuned_prompts``, ``ridge``, ``knn``)."""

    cfg: Config
    suite: Suite
    cond: Condition
    eval_options: Any


def _simple(name: str) -> Callable[[BaselineContext], Any]:
    return lambda ctx: simple_baselines(ctx.eval_options)[name]


def _tuned(name: str) -> Callable[[BaselineContext], Any]:
    return lambda ctx: tuned_baseline(name, ctx.cond, ctx.cfg, ctx.suite, ctx.eval_options)


ALIGN_BASELINES: dict[str, Callable[[BaselineContext], Any]] = {
    **{n: _simple(n) for n in ("zero", "averaging", "least-squares", "ridge", "knn")},
    **{n: _tuned(n) for n in ("ridge_tuned", "kernel", "radial", "blup")},
    "mlp_tuned": lambda ctx: tuned_mlp(ctx.cond, ctx.cfg, ctx.suite, ctx.eval_options),
}
"""Baselines by name: ``factory(BaselineContext) -> predictor`` with the ICL model's signature
(``(xs, ys) -> (B, n, d_y)``, causal, differentiable in ``xs`` and ``ys`` where it is; ``mlp_tuned`` (minutes,
not a default) through its training,
[`predict_last`][icdl.icl.baselines.mlp_tuned.MLPTunedBaseline.predict_last])."""

DEFAULT_BASELINES: tuple[str, ...] = ("averaging", "ridge", "ridge_tuned", "kernel", "radial", "blup")


def register_baseline(name: str, factory: Callable[[BaselineContext], Any], *, replace: bool = False) -> None:
    """Add a baseline to [`ALIGN_BASELINES`][icdl.icl.analysis.align.ALIGN_BASELINES] (e.g. ``mlp_tuned``)."""
    if name in ALIGN_BASELINES and not replace:
        raise ValueError(f"baseline {name!r} already registered")
    ALIGN_BASELINES[name] = factory


@dataclass(frozen=True)
class AlignOptions:
    """Settings of an alignment (all recorded in the result).

    ``ks=None``: [`default_ks`][icdl.icl.analysis.align.default_ks]; ``compiled_ks=None``: 5, 10 and the
    training length (those <= the longest k); ``compiled_ks=()`` skips the compiled model. ``batch``: prompts
    per autograd pass (memory). ``tuned_prompts`` / ``mlp_tune_prompts``: held-out prompts that tune
    ``ridge_tuned``/``kernel`` and ``mlp_tuned``.
    """

    prompts: int = 128
    ks: tuple[int, ...] | None = None
    baselines: tuple[str, ...] = DEFAULT_BASELINES
    gd_lrs: tuple[float, ...] = (0.03, 0.1, 0.3, 1.0, 3.0)
    gd_steps: tuple[int, ...] = (1, 3, 10, 30)
    gd_inits: tuple[float, ...] = (0.1, 1.0)
    compiled_ks: tuple[int, ...] | None = None
    compiled_prompts: int = 16
    compiled_max_steps: int = 10
    compiled_variant: str = "compact"
    tuned_prompts: int = 640
    mlp_tune_prompts: int = 128
    batch: int = 32

    def __post_init__(self) -> None:
        """Validate every field (the CLI's options are checked here)."""
        for name, low in (("prompts", 2), ("compiled_prompts", 1), ("compiled_max_steps", 1),
                          ("tuned_prompts", 2), ("mlp_tune_prompts", 2), ("batch", 1)):  # fmt: skip
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise InputError(f"{name.replace('_', '-')} must be an integer >= {low}, got {v!r}")
        for name in ("ks", "compiled_ks", "gd_steps"):
            vals = getattr(self, name)
            if vals is not None and not all(isinstance(v, int) and v >= 1 for v in vals):
                raise InputError(f"{name.replace('_', '-')} values must be integers >= 1, got {vals!r}")
        if self.ks is not None and not self.ks:
            raise InputError("ks must hold at least one k")
        for name in ("gd_lrs", "gd_inits"):
            vals = getattr(self, name)
            if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in vals):
                raise InputError(f"{name.replace('_', '-')} must hold finite numbers > 0, got {vals!r}")
        if bool(self.gd_lrs) != bool(self.gd_steps) or bool(self.gd_lrs) != bool(self.gd_inits):
            raise InputError("the GD grid needs step sizes, step counts and initial scales (or none of them)")
        for b in self.baselines:
            if b not in ALIGN_BASELINES:
                raise InputError(f"unknown baseline {b!r}; choose from {', '.join(ALIGN_BASELINES)}")

        get_variant(self.compiled_variant)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


def default_ks(train_examples: int, max_k: int) -> tuple[int, ...]:
    """1, 2, 3, 5, then every 5th k, the training length and the longest k (those <= ``max_k``)."""
    ks = {1, 2, 3, 5, train_examples, max_k, *range(5, max_k + 1, 5)}
    return tuple(sorted(k for k in ks if 1 <= k <= max_k))


#: the upper ends of the small-k bands (issue 27): a conclusion drawn from a mean over all ks is dominated
#: by the ks <= 5, where most predictors are near 0 and agree with anything that is
BAND_EDGES: tuple[int, ...] = (5, 15)


def k_bands(train_examples: int, max_k: int) -> list[tuple[int, int]]:
    """The k bands the alignment is concluded on: 1-5, 6-15, then 16 up to the training length E and
    E+1 up to the longest k (edges at or beyond E are dropped; e.g. 1-5, 6-15, 16-30, 31-45 for E = 30,
    K = 45, and 1-5, 6-10, 11-15 for E = 10, K = 15)."""
    E = min(train_examples, max_k)
    uppers = [e for e in BAND_EDGES if e < E] + [E] + ([max_k] if max_k > E else [])
    out, lo = [], 1
    for hi in uppers:
        out.append((lo, hi))
        lo = hi + 1
    return out


def closest_per_band(
    per: dict[str, Any], bands: Sequence[tuple[int, int]], metric: str = "corr"
) -> dict[str, dict[str, Any]]:
    """Per band, the predictor whose band mean of ``metric`` (default the correlation with ICL's
    predictions: scale-free) is highest among every predictor but ICL itself (baselines and each GD grid
    point by its name), with the runner-up and the margin between them. A band where fewer than two
    predictors have a finite mean names only what it has (no margin)."""
    out: dict[str, dict[str, Any]] = {}
    for lo, hi in bands:
        key = f"{lo}-{hi}"
        vals = [
            (entry["bands"][key][metric], name)
            for name, entry in per.items()
            if entry["kind"] != "icl" and math.isfinite(entry["bands"][key][metric])
        ]
        vals.sort(key=lambda t: -t[0])
        row: dict[str, Any] = {"metric": metric, "closest": vals[0][1] if vals else None}
        row["value"] = vals[0][0] if vals else math.nan
        if len(vals) > 1:
            row.update(runner_up=vals[1][1], runner_up_value=vals[1][0], margin=vals[0][0] - vals[1][0])
        out[key] = row
    return out


def gd_name(lr: float, steps: int, init: float) -> str:
    """The key of a GD grid point: ``gd_lr0.3_L10_init0.1``."""
    return f"gd_lr{lr:g}_L{steps}_init{init:g}"


def result_path(run_dir: str | Path) -> Path:
    """``RUN_DIR/align/align.json``."""
    return Path(run_dir) / "align" / "align.json"


# --------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------


def agreement_r2(target: Tensor, other: Tensor) -> float:
    """R² of ``other`` as a prediction of ``target`` (both ``(B, d_y)``): ``1 - Σ (t - o)² / Σ (t - t̄)²``,
    pooled over prompts and outputs, ``t̄`` the mean over prompts. NaN when ``target`` is constant or
    ``other`` is not finite."""
    t, o = target.double(), other.double()
    if not bool(o.isfinite().all()):
        return math.nan
    sst = float(((t - t.mean(0, keepdim=True)) ** 2).sum())
    return 1.0 - float(((t - o) ** 2).sum()) / sst if sst > 0 else math.nan


def mean_cosine(a: Tensor, b: Tensor) -> tuple[float, int]:
    """Mean over rows of ``cos(a_b, b_b)`` for ``(B, m)`` sensitivities, and the number of rows used (rows
    where either vector is zero or not finite are left out; NaN when none is left)."""
    a, b = a.double(), b.double()
    na, nb = a.norm(dim=1), b.norm(dim=1)
    ok = (na > 0) & (nb > 0) & a.isfinite().all(1) & b.isfinite().all(1)
    if not bool(ok.any()):
        return math.nan, 0
    cos = (a[ok] * b[ok]).sum(1) / (na[ok] * nb[ok])
    return float(cos.mean()), int(ok.sum())


def correlation(a: Tensor, b: Tensor) -> float:
    """Pearson correlation of two predictions ``(B, d_y)`` across prompts (pooled over outputs): the
    scale-free part of the agreement (``r2`` also charges a different scale or offset). NaN when either is
    constant or not finite."""
    a, b = a.double() - a.double().mean(0), b.double() - b.double().mean(0)
    if not (bool(a.isfinite().all()) and bool(b.isfinite().all())):
        return math.nan
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 0 else math.nan


def _compare(icl: sens.Sensitivity, other: sens.Sensitivity) -> dict[str, Any]:
    cy, ny = mean_cosine(icl.d_y, other.d_y)
    cx, nx = mean_cosine(icl.d_x, other.d_x)
    return {
        "r2": agreement_r2(icl.pred, other.pred), "corr": correlation(icl.pred, other.pred),
        "cos_y": cy, "cos_x": cx, "n_y": ny, "n_x": nx,
    }  # fmt: skip


def _r2_truth(pred: Tensor, y: Tensor) -> float:
    return agreement_r2(y, pred)


# --------------------------------------------------------------------------------------------------
# One k: every predictor's sensitivities on the same prompts
# --------------------------------------------------------------------------------------------------


def _cat(parts: list[sens.Sensitivity]) -> sens.Sensitivity:
    return sens.Sensitivity(*(torch.cat([getattr(p, f) for p in parts]) for f in ("pred", "d_y", "d_x")))


def _icl_sens(model: Any, xs: Tensor, ys: Tensor) -> sens.Sensitivity:
    dtype = next(model.parameters()).dtype
    x, y = sens.leaves(xs, ys, dtype)
    return sens.sensitivities([sens.last_point(model)(x, y)], x, y)[0]


def _baseline_sens(pred: Any, xs: Tensor, ys: Tensor) -> sens.Sensitivity:
    x, y = sens.leaves(xs, ys)
    return sens.sensitivities([sens.last_point(pred)(x, y)], x, y)[0]


def _gd_sens(
    spec: Any, w0s: dict[float, Tensor], xs: Tensor, ys: Tensor, opts: AlignOptions
) -> dict[str, Any]:
    """Every GD grid point on one prompt chunk (one trajectory per (init, lr), graphs freed in between)."""
    out: dict[str, sens.Sensitivity] = {}
    for init, w0 in w0s.items():
        for lr in opts.gd_lrs:
            x, y = sens.leaves(xs, ys)
            preds = sens.gd_predictions(spec, w0, x, y, lrs=[lr], steps=opts.gd_steps)
            keys = sorted(preds)
            for (lr_, L), s in zip(keys, sens.sensitivities([preds[key] for key in keys], x, y), strict=True):
                out[gd_name(lr_, L, init)] = s
    return out


def _sens_at_k(
    k: int, pb: PromptBatch, model: Any, baselines: dict[str, Any], spec: Any, w0s: dict[float, Tensor],
    opts: AlignOptions,
) -> dict[str, sens.Sensitivity]:  # fmt: skip
    """ICL (key ``icl``), every baseline and every GD grid point on the test prompts truncated to k + 1
    points, in chunks of ``opts.batch`` prompts."""
    parts: dict[str, list[sens.Sensitivity]] = {}
    for s in range(0, pb.xs.shape[0], opts.batch):
        xs, ys = pb.xs[s : s + opts.batch, : k + 1], pb.ys[s : s + opts.batch, : k + 1]
        chunk = {"icl": _icl_sens(model, xs, ys)}
        chunk.update({name: _baseline_sens(b, xs, ys) for name, b in baselines.items()})
        if opts.gd_lrs:
            chunk.update(_gd_sens(spec, w0s, xs, ys, opts))
        for name, v in chunk.items():
            parts.setdefault(name, []).append(v)
    return {name: _cat(v) for name, v in parts.items()}


# --------------------------------------------------------------------------------------------------
# The compiled model of the best-aligned GD point
# --------------------------------------------------------------------------------------------------


def _best_gd(per: dict[str, Any], opts: AlignOptions, max_steps: int | None = None) -> str | None:
    """The GD grid point with the highest mean R² against ICL over ks (points not finite at every k are
    left out), among those with L <= ``max_steps``."""
    best, score = None, -math.inf
    for init in opts.gd_inits:
        for lr in opts.gd_lrs:
            for L in opts.gd_steps:
                if max_steps is not None and max_steps < L:
                    continue
                r2 = per[gd_name(lr, L, init)]["r2"]
                if r2 and all(math.isfinite(v) for v in r2) and sum(r2) / len(r2) > score:
                    best, score = gd_name(lr, L, init), sum(r2) / len(r2)
    return best


def _compiled_k(
    k: int, point: tuple[float, int, float], model: Any, spec: Any, w0: Tensor, pb: PromptBatch,
    opts: AlignOptions,
) -> dict[str, Any]:  # fmt: skip
    """The compiled model for n = k examples on the first ``compiled_prompts`` prompts, against ICL and
    against the GD point it compiles (the target of that comparison)."""
    lr, L, _ = point
    cm = compile_gd_transformer(spec, lr=lr, steps=L, n=k, variant=opts.compiled_variant)
    comp, gd, icl = [], [], []
    m, chunk = opts.compiled_prompts, 4  # the compiled model's states are T x D, D in the thousands
    for s in range(0, m, chunk):
        xs, ys = pb.xs[s : min(s + chunk, m), : k + 1], pb.ys[s : min(s + chunk, m), : k + 1]
        x, y = sens.leaves(xs, ys)
        comp.append(sens.sensitivities([sens.compiled_prediction(cm, w0, x, y)], x, y)[0])
        x, y = sens.leaves(xs, ys)
        gd.append(
            sens.sensitivities([sens.gd_predictions(spec, w0, x, y, lrs=[lr], steps=[L])[(lr, L)]], x, y)[0]
        )
        icl.append(_icl_sens(model, xs, ys))
    c, g, i = _cat(comp), _cat(gd), _cat(icl)
    return {
        "k": k,
        "prompts": int(c.pred.shape[0]),
        "vs_gd": _compare(g, c),
        "vs_icl": _compare(i, c),
        "gd_vs_icl": _compare(i, g),
        "max_abs_pred_diff": float((c.pred - g.pred).abs().max()),
        "embedding_dim": cm.embedding_dim,
        "sublayers": cm.num_sublayers + cm.readout_sublayers,
    }


def _compiled(
    per: dict[str, Any], cks: list[int], model: Any, spec: Any, w0s: dict[float, Tensor], pb: PromptBatch,
    opts: AlignOptions, bar: Any,
) -> dict[str, Any] | None:  # fmt: skip
    """The compiled model of the best GD point with L <= ``compiled_max_steps`` at every compiled k (None
    without a GD grid, compiled ks or a finite grid point)."""
    point_name = _best_gd(per, opts, opts.compiled_max_steps) if opts.gd_lrs else None
    if point_name is None or not cks:
        return None
    p = per[point_name]["params"]
    point = (float(p["lr"]), int(p["steps"]), float(p["init"]))
    rows = []
    for k in cks:
        bar.set_description(f"compiled k={k}")
        rows.append(_compiled_k(k, point, model, spec, w0s[point[2]], pb, opts))
        bar.update(1)
    return {"point": point_name, "lr": point[0], "steps": point[1], "init": point[2],
            "variant": opts.compiled_variant, "ks": rows}  # fmt: skip


def _compiled_ks(opts: AlignOptions, train_examples: int, max_k: int) -> list[int]:
    ks = opts.compiled_ks if opts.compiled_ks is not None else (5, 10, train_examples)
    return sorted({k for k in ks if 1 <= k <= max_k})


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def _check_finished(run_dir: str | Path, ck: dict[str, Any], cfg: Config, allow_partial: bool) -> None:
    if ck["step"] < cfg.train.steps and not allow_partial:
        raise InputError(
            f"run {str(run_dir)!r} is unfinished (newest checkpoint at step {ck['step']} of "
            f"{cfg.train.steps}); wait for it, or pass --partial to align that checkpoint"
        )


def _check_ks(ks: Sequence[int], max_k: int, what: str) -> None:
    bad = [k for k in ks if k > max_k]
    if bad:
        raise InputError(f"{what} {bad} exceed the test prompts' longest k = {max_k}")


def _summaries(
    per: dict[str, Any], ks: list[int], ranges: list[tuple[int, int]], field: str = "ranges"
) -> None:
    """Add each predictor's mean of every metric over the ks in each k range as ``entry[field]``
    (non-finite values skipped)."""
    for entry in per.values():
        out: dict[str, dict[str, float]] = {}
        for lo, hi in ranges:
            idx = [i for i, k in enumerate(ks) if lo <= k <= hi]
            out[f"{lo}-{hi}"] = {}
            for metric in ("r2", "corr", "cos_y", "cos_x", "r2_truth"):
                # None: a NaN as read back from the JSON (clean_json writes null)
                vals = [v for v in (entry[metric][i] for i in idx) if v is not None and math.isfinite(v)]
                out[f"{lo}-{hi}"][metric] = sum(vals) / len(vals) if vals else math.nan
        entry[field] = out


def _progress(total: int, enabled: bool | None) -> Any:
    from tqdm.auto import tqdm

    disable = (not sys.stderr.isatty()) if enabled is None else not enabled
    return tqdm(total=total, unit="k", dynamic_ncols=True, disable=disable, leave=False)


def _make_baselines(cfg: Config, st: Suite, cond: Condition, opts: AlignOptions) -> dict[str, Any]:
    """Every baseline of ``opts.baselines``, the tuned ones tuned on held-out prompts."""
    evo = EvalOptions(tuned_prompts=opts.tuned_prompts, mlp_tune_prompts=opts.mlp_tune_prompts)
    ctx = BaselineContext(cfg, st, cond, evo)
    return {name: ALIGN_BASELINES[name](ctx) for name in opts.baselines}


def _predictors(
    opts: AlignOptions, baselines: dict[str, Any], w0s: dict[float, Tensor]
) -> dict[str, dict[str, Any]]:
    """Empty per-k records of every predictor, with what it is."""
    per: dict[str, dict[str, Any]] = {
        "icl": {"kind": "icl", "params": {}},
        **{name: {"kind": "baseline", "params": _baseline_params(b)} for name, b in baselines.items()},
    }
    for init in w0s:
        for lr in opts.gd_lrs:
            for L in opts.gd_steps:
                per[gd_name(lr, L, init)] = {"kind": "gd", "params": {"lr": lr, "steps": L, "init": init}}
    for entry in per.values():
        entry.update({m: [] for m in ("r2", "corr", "cos_y", "cos_x", "n_y", "n_x", "r2_truth")})
    return per


def _baseline_params(b: Any) -> dict[str, Any]:
    lam = getattr(b, "lam", None)
    return {"name": b.name, **({"lam": list(lam) if isinstance(lam, (list, tuple)) else lam} if lam else {})}


def _measure(
    ks: list[int], pb: PromptBatch, model: Any, baselines: dict[str, Any], spec: Any,
    w0s: dict[float, Tensor], opts: AlignOptions, bar: Any,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Every predictor's per-k metrics against ICL (ICL's own entry: against itself, and vs the labels)."""
    per = _predictors(opts, baselines, w0s)
    for k in ks:
        bar.set_description(f"align k={k}")
        S = _sens_at_k(k, pb, model, baselines, spec, w0s, opts)
        y = pb.ys[:, k].double()
        for name, entry in per.items():
            for metric, v in _compare(S["icl"], S[name]).items():
                entry[metric].append(v)
            entry["r2_truth"].append(_r2_truth(S[name].pred, y))
        bar.update(1)
    return per


def align_run(
    run_dir: str | Path,
    options: AlignOptions | None = None,
    *,
    seed: int = EVAL_SEED,
    allow_partial: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Measure the run's newest checkpoint against every predictor (module docstring) and write
    ``RUN_DIR/align/align.json``. Returns the result: ``ks``, ``predictors.<name>`` (``kind``, ``params``
    and per k ``r2``, ``corr``, ``cos_y``, ``cos_x``, the prompt counts ``n_y``/``n_x`` behind the cosines,
    ``r2_truth`` — R² against the true labels — and ``ranges``: means over the ks in 1..E and E+1..K),
    ``gd_best`` (the best grid point overall, and per k the best R² and its point), ``compiled`` (per
    compiled k:
    ``vs_gd``, ``vs_icl``, ``gd_vs_icl``, ``max_abs_pred_diff``) and provenance."""
    opts = options or AlignOptions()
    ck = checkpoint_info(run_dir)
    model, cfg = load_run(run_dir)
    _check_finished(run_dir, ck, cfg, allow_partial)
    st = build_suite("in-distribution", cfg, prompts=opts.prompts, seed=seed)
    cond = st.conditions[0]
    max_k = cond.points - 1
    ks = list(opts.ks) if opts.ks is not None else list(default_ks(st.train_examples, max_k))
    _check_ks(ks, max_k, "ks")
    cks = _compiled_ks(opts, st.train_examples, max_k)
    t0 = time.perf_counter()
    pb = draw_prompts(cond, opts.prompts, st.seed)
    baselines = _make_baselines(cfg, st, cond, opts)
    spec = net_spec(cfg.task)

    w0s = {
        float(i): GDBaseline(spec, seed=st.seed, init_std=float(i)).initial_weights() for i in opts.gd_inits
    }
    bar = _progress(len(ks) + len(cks), progress)
    try:
        per = _measure(ks, pb, model, baselines, spec, w0s, opts, bar)
        best = _best_gd(per, opts) if opts.gd_lrs else None
        compiled = _compiled(per, cks, model, spec, w0s, pb, opts, bar)
    finally:
        bar.close()
    ranges = k_ranges(st.train_examples, max_k)
    _summaries(per, ks, ranges)
    result = {
        "format": FORMAT,
        "run": {
            "run_dir": portable_path(run_dir),
            "name": cfg.name,
            "train_seed": cfg.train.seed,
            "attention": cfg.model.attention,
            "layers": cfg.model.layers,
            "target_depth": cfg.task.depth,
            "train_examples": cfg.task.examples,
        },
        "checkpoint": ck,
        "config": cfg.model_dump(mode="json"),
        "options": opts.to_dict(),
        "test": {
            "suite": st.name,
            "condition": cond.name,
            "seed": st.seed,
            "prompts": opts.prompts,
            "tune_seed": st.seed + 1,
        },
        "ks": ks,
        "ranges": [list(r) for r in ranges],
        "predictors": per,
        "gd_best": _gd_best(per, ks, best, opts),
        "compiled": compiled,
        "computed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - t0,
        "threads": torch.get_num_threads(),
    }
    add_bands(result, st.train_examples, max_k)
    result = clean_json(result)
    atomic_write_json(result_path(run_dir), result)
    return result


def add_bands(result: dict[str, Any], train_examples: int, max_k: int) -> dict[str, Any]:
    """Add the k bands to an alignment result (in place, and returned): ``bands``
    ([`k_bands`][icdl.icl.analysis.align.k_bands]), each predictor's band means
    (``predictors.<name>.bands``) and ``closest``
    ([`closest_per_band`][icdl.icl.analysis.align.closest_per_band]). Only the per-k values are read, so
    a result written before the bands existed gets the same numbers as a fresh run."""
    bands = k_bands(train_examples, max_k)
    _summaries(result["predictors"], list(result["ks"]), bands, "bands")
    result["bands"] = [list(b) for b in bands]
    result["closest"] = closest_per_band(result["predictors"], bands)
    return result


def _gd_best(
    per: dict[str, Any], ks: list[int], best: str | None, opts: AlignOptions
) -> dict[str, Any] | None:
    """The best GD grid point by mean R² over ks, and per k the best R² over the grid and its point."""
    if best is None:
        return None
    names = [n for n, e in per.items() if e["kind"] == "gd"]
    per_k, points = [], []
    for i in range(len(ks)):
        vals = [(per[n]["r2"][i], n) for n in names if math.isfinite(per[n]["r2"][i])]
        v, n = max(vals) if vals else (math.nan, None)
        per_k.append(v)
        points.append(n)
    return {"overall": best, "r2_per_k": per_k, "point_per_k": points}


# --------------------------------------------------------------------------------------------------
# Work estimate (icdl.budget)
# --------------------------------------------------------------------------------------------------


def align_estimate(cfg: Config, options: AlignOptions | None = None) -> Estimate:
    """Memory and time of [`align_run`][icdl.icl.analysis.align.align_run] from the config alone.

    Per k: the ICL model's forward and backward passes (``prompts x 2(k+1)`` tokens), the baselines
    (a ``(k+1)³`` Cholesky per prompt; the λ tuning once), and the GD grid: per ``(init, lr)`` a trajectory of
    ``max L`` steps, each ``~6 k P`` FLOPs per prompt for P target weights, plus one backward pass per L
    (``2 L`` steps); FLOPs at `icdl.budget.CPU_FLOPS`. The compiled model: ``icdl construct``'s estimate
    ([`construction_estimate`][icdl.construct.estimate.construction_estimate]) for ``compiled_max_steps``
    steps at each compiled k, times the compiled prompts.
    """
    opts = options or AlignOptions()
    task, m = cfg.task, cfg.model
    spec = net_spec(task)
    max_k = eval_points(cfg) - 1
    ks = list(opts.ks) if opts.ks is not None else list(default_ks(task.examples, max_k))
    P, W = opts.prompts, spec.num_params
    icl_params = m.layers * (4 * m.d_model**2 + 2 * m.d_mlp * m.d_model)
    grid = len(opts.gd_inits) * len(opts.gd_lrs) * (max(opts.gd_steps, default=0) + 2 * sum(opts.gd_steps))
    flops = 0.0
    for k in ks:
        flops += 3 * 2 * icl_params * P * 2 * (k + 1) + 6 * len(opts.baselines) * P * (k + 1) ** 3
        flops += grid * 6 * P * k * W
    flops += 2 * len(DEFAULT_LAMBDAS) * opts.tuned_prompts * (m.max_points**3 + m.max_points**2 * task.dim)
    if "blup" in opts.baselines:  # its Monte Carlo moment: DEFAULT_TARGETS networks at every point
        n = max_k + 1
        flops += 2 * BLUP_TARGETS * (P + opts.tuned_prompts) * n * (W + n)
    # The GD graph kept for the backward passes: per step the weights and the Lemma 1 intermediates.
    steps_kept = max(opts.gd_steps, default=1)
    mem = 8.0 * opts.batch * steps_kept * (2 * W + 8 * max(ks) * task.width * task.depth)
    secs = flops / CPU_FLOPS * 10 + 5.0  # the GD grid's many small tensor ops run far below peak
    for k in _compiled_ks(opts, task.examples, max_k) if opts.gd_lrs else []:
        est = construction_estimate(
            spec, steps=opts.compiled_max_steps, examples=k, variant=opts.compiled_variant
        )
        secs += (est.seconds or 0.0) * opts.compiled_prompts
        mem = max(mem, est.bytes * 2)  # dense D x D compile temporaries, autograd states of 4 prompts
    return Estimate(
        "icdl align",
        float(mem + 400 * 2**20),
        float(secs),
        f"{len(ks)} k values x {P} prompts, {len(opts.baselines)} baselines, "
        f"{len(opts.gd_inits) * len(opts.gd_lrs) * len(opts.gd_steps)} GD grid points",
    )
