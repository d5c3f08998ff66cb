"""Evaluate in-context score estimation: error curves per k and samples per k, against baselines.

* [`score_curves`][icdl.diffusion.evaluate.score_curves] — on fresh test prompts, the h-weighted error against
  the exact score ([`icdl.diffusion.metrics.score_error`][icdl.diffusion.metrics.score_error], 90 % bootstrap
  bands over prompts) and the h-weighted DSM loss against the noisy targets (where the exact score is the
  irreducible floor), for the ICL model, the context-trained network, the closed-form estimators of
  [`icdl.diffusion.baselines`][icdl.diffusion.baselines] and the trivial ``-x``.
* [`sampling_distances`][icdl.diffusion.evaluate.sampling_distances] — for a few test prompts (fresh mixtures)
  and context sizes k, samples from the reverse-time sampler
  ([`icdl.diffusion.sampler`][icdl.diffusion.sampler]) driven by each estimator's score given the first k
  context pairs, and their sliced W2 / MMD to fresh samples of the prompt's true ``p_0``; the exact score's
  samples and a second true sample give the floors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from icdl.diffusion.baselines import (
    ContextMLP,
    EmpiricalScore,
    GaussianFitScore,
    GDScore,
    PriorScore,
    ScoreFn,
    score_fn,
)
from icdl.diffusion.config import ScoreConfig
from icdl.diffusion.density import PopulationScore
from icdl.diffusion.metrics import mmd, score_error, sliced_wasserstein
from icdl.diffusion.sampler import Method, sample
from icdl.diffusion.task import Mixture, ou_h, sample_score_batch
from icdl.diffusion.tuning import TunedScore
from icdl.errors import InputError
from icdl.icl.models import ICLTransformer

__all__ = ["icl_predictor", "icl_score_fn", "mean_bands", "sampling_distances", "score_curves"]

Predictor = Callable[[Tensor, Tensor], Tensor]


def icl_predictor(model: ICLTransformer) -> Predictor:
    """The ICL model as a causal predictor in float64 in, float64 out (the model runs in float32)."""

    def fn(xs: Tensor, ys: Tensor) -> Tensor:
        with torch.no_grad():
            out = torch.cat(
                [model(xs[i : i + 256].float(), ys[i : i + 256].float()) for i in range(0, len(xs), 256)]
            )
        return out.to(xs.dtype)

    return fn


def icl_score_fn(model: ICLTransformer, ctx_xs: Tensor, ctx_ys: Tensor) -> ScoreFn:
    """The ICL model's score function given one context, with the context's keys and values cached.

    Equals ``score_fn(icl_predictor(model), ctx_xs, ctx_ys)`` (tested) — the query ``(x, t)`` is point k
    after the k context pairs — but runs the k context pairs through the model once: the model is
    causal, so their hidden states do not depend on the query, and each query costs one token per block
    instead of ``2k + 1``. Uses the blocks of
    [`icdl.icl.models.ICLTransformer`][icdl.icl.models.ICLTransformer] directly.
    """
    import torch.nn.functional as F

    k = ctx_xs.shape[0]
    if k + 1 > model.max_points:
        raise InputError(f"a context of {k} examples exceeds the model's {model.max_points - 1}")
    wpe = model.wpe
    if wpe is None:
        raise InputError(
            "the cached score path needs a model with learned positions (model.positions=learned)"
        )
    with torch.no_grad():
        tok = model.tokens(ctx_xs[None].float(), ctx_ys[None].float())  # (1, 2k, d_tok)
        h = model.read_in(tok) + wpe(torch.arange(2 * k))
        cache: list[tuple[Tensor, Tensor]] = []  # per block: context keys, values (1, H, 2k, d_head)
        block: Any
        for block in model.blocks:
            att: Any = block.attn
            C = h.shape[-1]
            _, kk, vv = att.qkv(block.ln1(h)).split(C, dim=-1)
            H = att.heads
            cache.append(tuple(t.view(1, 2 * k, H, C // H).transpose(1, 2) for t in (kk, vv)))  # type: ignore[misc]
            h = block(h)

    def fn(x: Tensor, t: float) -> Tensor:
        M = x.shape[0]
        q_in = torch.cat([x, torch.full_like(x[:, :1], t)], -1).float()
        with torch.no_grad():
            h = model.read_in(F.pad(q_in, (0, model.d_tok - model.d_x)))[:, None] + wpe.weight[2 * k]
            blocks: list[Any] = list(model.blocks)
            for block, (ck, cv) in zip(blocks, cache, strict=True):
                att = block.attn
                C, H = h.shape[-1], att.heads
                q, kq, vq = att.qkv(block.ln1(h)).split(C, dim=-1)
                q, kq, vq = (z.view(M, 1, H, C // H).transpose(1, 2) for z in (q, kq, vq))  # (M, H, 1, dh)
                keys = torch.cat([ck.expand(M, -1, -1, -1), kq], 2)  # (M, H, 2k + 1, dh)
                vals = torch.cat([cv.expand(M, -1, -1, -1), vq], 2)
                scores = q @ keys.transpose(-1, -2) / math.sqrt(C // H)  # (M, H, 1, 2k + 1)
                if att.attention == "softmax":
                    a = torch.softmax(scores, -1) @ vals
                else:  # normalised ReLU attention: 2k + 1 visible keys, or the full length 2k + 2
                    denom = 2 * k + 1 if att.relu_norm == "causal" else 2 * k + 2
                    a = torch.relu(scores) @ vals / denom
                h = h + att.proj(a.transpose(1, 2).reshape(M, 1, C))
                h = h + block.mlp(block.ln2(h))
            out = model.read_out(model.ln_f(h))[:, 0]
        return out.to(x.dtype)

    return fn


def _closed_form(cfg: ScoreConfig) -> list[Any]:
    return [PriorScore(), PopulationScore.for_task(cfg.task), GaussianFitScore(), EmpiricalScore()]


def score_curves(
    model: ICLTransformer | None,
    cfg: ScoreConfig,
    *,
    prompts: int = 256,
    seed: int = 12345,
    mlp: ContextMLP | None = None,
    gd: GDScore | None = None,
    tuned: Sequence[TunedScore] = (),
    resamples: int = 1000,
) -> dict[str, Any]:
    """Score-error and DSM-loss curves ``k = 0 .. examples`` for every estimator (JSON-ready dict).

    ``model`` None evaluates the baselines only; ``mlp`` / ``gd`` None skip the context-trained network /
    plain GD on the bias-free score network; ``tuned``: baselines tuned on held-out prompts
    ([`icdl.diffusion.tuning`][icdl.diffusion.tuning]), whose choices go to ``"tuning"``.
    """
    if prompts < 2:
        raise InputError(f"need at least 2 test prompts, got {prompts}")
    b = sample_score_batch(cfg.task, prompts, seed=seed, dtype=torch.float64)
    exact = b.exact_score()
    w = ou_h(b.t)[..., None]
    preds: dict[str, Tensor] = {}
    if model is not None:
        preds["icl"] = icl_predictor(model)(b.xs, b.ys)
    if mlp is not None:
        preds[mlp.name] = mlp(b.xs, b.ys)
    if gd is not None:
        preds[gd.name] = gd(b.xs, b.ys)
    for est in [*_closed_form(cfg), *tuned]:
        with torch.no_grad():
            preds[est.name] = est(b.xs, b.ys)
    out: dict[str, Any] = {
        "k": list(range(b.xs.shape[1])),
        "prompts": prompts,
        "seed": seed,
        "score_error": {},
        "dsm_loss": {"exact": (w * (exact - b.ys) ** 2).mean((0, 2)).tolist()},
        "tuning": {est.name: est.report() for est in tuned},
    }
    for name, p in preds.items():
        out["score_error"][name] = score_error(p, exact, b.t, resamples=resamples)
        out["dsm_loss"][name] = (w * (p - b.ys) ** 2).mean((0, 2)).tolist()
    # The scale of the problem: the h-weighted squared norm of the exact score.
    out["score_norm"] = (w * exact**2).mean((0, 2)).mean().item()
    return out


def _one_prompt_score(mix: Mixture) -> ScoreFn:
    def fn(x: Tensor, t: float) -> Tensor:
        return mix.score(x[None], torch.full((1, x.shape[0]), t, dtype=x.dtype))[0]

    return fn


def _score_fns(
    model: ICLTransformer | None, mlp: ContextMLP | None, others: Sequence[Any], cx: Tensor, cy: Tensor
) -> dict[str, ScoreFn]:
    """Every estimator's score function for one context: ICL, the context MLP, the closed forms and the
    tuned baselines (their own ``score_fn``: fitted once per context)."""
    fns: dict[str, ScoreFn] = {}
    if model is not None:
        fns["icl"] = icl_score_fn(model, cx, cy)
    if mlp is not None:
        fns[mlp.name] = mlp.score_fn(cx, cy)
    for est in others:
        fns[est.name] = est.score_fn(cx, cy) if hasattr(est, "score_fn") else score_fn(est, cx, cy)
    return fns


def mean_bands(
    values: Sequence[float], *, resamples: int = 1000, level: float = 0.9, seed: int = 0
) -> dict[str, float]:
    """``{"mean", "low", "high"}``: the mean of ``values`` (one per mixture) and its percentile-bootstrap
    band over mixtures; NaN values (a diverged sampler) make every entry NaN."""
    v = torch.tensor(list(values), dtype=torch.float64)
    if v.numel() == 0 or v.isnan().any():
        return {"mean": math.nan, "low": math.nan, "high": math.nan}
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, v.numel(), (resamples, v.numel()), generator=g)
    means = v[idx].mean(1)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    low, high = torch.quantile(means, q).tolist()
    return {"mean": float(v.mean()), "low": low, "high": high}


def _distance_summary(per_prompt: dict[str, list[list[float]]], ref: str | None) -> dict[str, Any]:
    """Means, bands over mixtures, and (with ``ref``) paired bands of ``name - ref`` per k."""
    out: dict[str, Any] = {"mean": {}, "low": {}, "high": {}}
    if ref is not None:
        out["minus_" + ref] = {}
    for name, per_k in per_prompt.items():
        bands = [mean_bands(v) for v in per_k]
        for key in ("mean", "low", "high"):
            out[key][name] = [b[key] for b in bands]
        if ref is not None and name != ref:
            pairs = zip(per_k, per_prompt[ref], strict=True)
            out["minus_" + ref][name] = [
                mean_bands([a - b for a, b in zip(v, r, strict=True)]) for v, r in pairs
            ]
    return out


def sampling_distances(
    model: ICLTransformer | None,
    cfg: ScoreConfig,
    *,
    ks: Sequence[int] = (5, 10, 20, 40),
    prompts: int = 16,
    samples: int = 500,
    steps: int = 50,
    method: Method = "ode",
    seed: int = 777,
    mlp: ContextMLP | None = None,
    tuned: Sequence[TunedScore] = (),
    keep_samples: bool = False,
) -> dict[str, Any]:
    """Sliced W2 and MMD between sampled and true ``p_0`` per k over ``prompts`` mixtures, with bands.

    Returns ``{"ks", "sw": {name: [mean per k]}, "mmd": {...}, "sw_bands" / "mmd_bands": {"mean", "low",
    "high", "minus_icl"}, "sw_per_prompt", "mmd_per_prompt", "floor", "floor_bands"}``: 90 % percentile
    bootstrap bands over mixtures, and with the ICL model, paired bands of ``baseline - icl`` (positive:
    ICL is closer to ``p_0``). With ``keep_samples`` also ``"samples"`` (tensors of the first prompt at the
    largest k, not JSON).
    """
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1 or ks[-1] > cfg.task.examples:
        raise InputError(f"ks must lie in 1..{cfg.task.examples} (the training prompt length), got {ks}")
    if samples < 2 or prompts < 1 or steps < 1:
        raise InputError("need samples >= 2, prompts >= 1 and steps >= 1")
    b = sample_score_batch(cfg.task, prompts, seed=seed, points=ks[-1], dtype=torch.float64)
    d, t_max, t_min = cfg.task.dim, cfg.task.t_max, cfg.task.t_min
    others = [*_closed_form(cfg), *tuned]
    names = (["icl"] if model is not None else []) + ([mlp.name] if mlp is not None else [])
    names += [e.name for e in others]
    sw: dict[str, list[list[float]]] = {n: [[] for _ in ks] for n in names}
    mm: dict[str, list[list[float]]] = {n: [[] for _ in ks] for n in names}
    floor: dict[str, list[float]] = {"exact_sw": [], "exact_mmd": [], "true_sw": [], "true_mmd": []}
    kept: dict[str, Tensor] = {}

    def run(fn: ScoreFn, p: int) -> Tensor:
        return sample(
            fn, samples, d, t_max=t_max, t_min=t_min, steps=steps, method=method, seed=seed + p,
            dtype=torch.float64,
        ).to(torch.float64)  # fmt: skip

    for p in range(prompts):
        mix = b.mixture[p]
        gen = np.random.default_rng(np.random.SeedSequence([seed, p]))
        true, true2 = mix.sample(samples, gen)[0], mix.sample(samples, gen)[0]
        ex = run(_one_prompt_score(mix), p)
        for key, val in (("exact", ex), ("true", true2)):
            floor[key + "_sw"].append(sliced_wasserstein(val, true))
            floor[key + "_mmd"].append(mmd(val, true))
        if keep_samples and p == 0:
            kept["true"], kept["exact"] = true, ex
        for i, k in enumerate(ks):
            cx, cy = b.xs[p, :k], b.ys[p, :k]
            for name, fn in _score_fns(model, mlp, others, cx, cy).items():
                s = run(fn, p)
                finite = bool(torch.isfinite(s).all())
                sw[name][i].append(sliced_wasserstein(s, true) if finite else math.nan)
                mm[name][i].append(mmd(s, true) if finite else math.nan)
                if keep_samples and p == 0 and k == ks[-1] and finite:
                    kept[name] = s
            if keep_samples and p == 0 and k == ks[-1]:
                kept["context"] = (cx[:, :-1] + ou_h(cx[:, -1:]) * cy) / torch.exp(-cx[:, -1:] / 2)
    ref = "icl" if model is not None else None
    sw_bands, mmd_bands = _distance_summary(sw, ref), _distance_summary(mm, ref)
    out: dict[str, Any] = {
        "ks": ks, "prompts": prompts, "samples": samples, "steps": steps, "method": method, "seed": seed,
        "sw": sw_bands["mean"], "mmd": mmd_bands["mean"], "sw_bands": sw_bands, "mmd_bands": mmd_bands,
        "sw_per_prompt": sw, "mmd_per_prompt": mm,
        "floor": {key: float(np.mean(v)) for key, v in floor.items()},
        "floor_bands": {key: mean_bands(v) for key, v in floor.items()},
        "tuning": {est.name: est.report() for est in tuned},
    }  # fmt: skip
    if keep_samples:
        out["samples_first_prompt"] = kept
    return out
