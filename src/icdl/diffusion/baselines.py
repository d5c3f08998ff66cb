"""Score estimators with the ICL model's signature, for prompts ``((x_t, t), y)`` of the score task.

Every estimator is a *causal predictor* like [`icdl.icl.baselines.simple`][icdl.icl.baselines.simple]:
``__call__(xs, ys) -> preds`` with ``xs (B, n, d + 1) = [x_t, t]``, ``ys (B, n, d)`` DSM targets, and
``preds[:, j]`` the score estimate at query ``xs[:, j]`` from the context ``(xs[:, i], ys[:, i]), i < j``
only.

The context reveals its clean points: ``alpha_i x_0,i = x_t,i + h_i y_i``
([`context_x0`][icdl.diffusion.baselines.context_x0]), so the closed-form estimators work on the recovered
``x_0``:

* [`PriorScore`][icdl.diffusion.baselines.PriorScore] — the trivial baseline ``-x``: the score of ``N(0, I)``,
  the OU process's stationary law (exact as ``t -> ∞``), ignoring the context.
* [`GaussianFitScore`][icdl.diffusion.baselines.GaussianFitScore] — fit one Gaussian ``N(mu, Σ)`` to the
  context's ``x_0`` (shrunk towards ``N(0, I)`` with one pseudo-point) and return the exact score of its
  diffusion, ``-(alpha^2 Σ + h I)^{-1} (x - alpha mu)``.
* [`EmpiricalScore`][icdl.diffusion.baselines.EmpiricalScore] — the exact score of the context's empirical
  distribution diffused to time t, ``(1/k) Σ_i N(alpha x_0,i, h I)``: the minimiser of the DSM loss on the
  context over *all* functions (it memorises the context points).
* [`GDScore`][icdl.diffusion.baselines.GDScore] — the algorithm the compiled construction runs
  ([`icdl.diffusion.construct`][icdl.diffusion.construct]): L steps of plain GD on the (unweighted) DSM loss
  of the paper's bias-free ReLU score network with a linear output, from one seeded He-random ``w0``, then the
  query prediction ``f(w^(L), [x, t])``. With ``init="prior"`` it starts instead from
  [`prior_start_weights`][icdl.diffusion.baselines.prior_start_weights], whose network outputs the prior
  score ``-x`` exactly.
* [`ContextMLP`][icdl.diffusion.baselines.ContextMLP] — an N-layer ReLU score network ``[x_t, t] -> R^d``
  (biases, linear output) trained on the k context pairs by full-batch Adam on the h-weighted DSM loss, one
  per prompt and k (all prompts in parallel, as
  [`icdl.icl.baselines.simple.MLPBaseline`][icdl.icl.baselines.simple.MLPBaseline]).

[`score_fn`][icdl.diffusion.baselines.score_fn] turns any causal predictor and a context into a function ``(x
(M, d), t) -> (M, d)`` for the samplers ([`icdl.diffusion.sampler`][icdl.diffusion.sampler]).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from icdl.diffusion.task import ou_alpha, ou_h
from icdl.errors import InputError
from icdl.icl.baselines.simple import check_prompts
from icdl.nets import NetSpec, flatten, forward, init_weights, reference_gd, unflatten

__all__ = [
    "ContextMLP",
    "EmpiricalScore",
    "GDScore",
    "GaussianFitScore",
    "PriorScore",
    "ScoreFn",
    "context_x0",
    "prior_start_weights",
    "score_fn",
]

ScoreFn = Callable[[Tensor, float], Tensor]  # (x (M, d), t) -> score (M, d)


def context_x0(xs: Tensor, ys: Tensor) -> Tensor:
    """Clean points recovered from DSM pairs: ``x_0 = (x_t + h_t y) / alpha_t``, ``(B, n, d)``."""
    t = xs[..., -1:]
    return (xs[..., :-1] + ou_h(t) * ys) / ou_alpha(t)


@dataclass(frozen=True)
class PriorScore:
    """``s(x, t) = -x``: the stationary ``N(0, I)`` score; uses no context (the trivial baseline)."""

    @property
    def name(self) -> str:
        return "prior"

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        return -xs[..., :-1]


@dataclass(frozen=True)
class GaussianFitScore:
    """Exact score of the diffused Gaussian fitted to the context's clean points.

    After k examples: ``mu = S1 / (k + 1)``, ``Σ = (Σ_i (x_0,i - mu)(x_0,i - mu)^T + I) / (k + 1)`` — the
    ``N(0, I)`` prior acts as one pseudo-point, so k = 0 gives
    [`PriorScore`][icdl.diffusion.baselines.PriorScore].
    """

    @property
    def name(self) -> str:
        return "gaussian_fit"

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        x0 = context_x0(xs, ys)  # (B, n, d)
        n, d = x0.shape[1:]
        # Prefix sums over the examples BEFORE each position.
        s1 = torch.cumsum(x0, 1) - x0  # (B, n, d)
        s2 = torch.cumsum(x0[..., :, None] * x0[..., None, :], 1) - x0[..., :, None] * x0[..., None, :]
        k = torch.arange(n, dtype=xs.dtype, device=xs.device)[None, :, None]  # (1, n, 1)
        mu = s1 / (k + 1)
        eye = torch.eye(d, dtype=xs.dtype, device=xs.device)
        # Σ_i (x_i - mu)(x_i - mu)^T = S2 - mu S1^T - S1 mu^T + k mu mu^T
        scatter = s2 - mu[..., :, None] * s1[..., None, :] - s1[..., :, None] * mu[..., None, :]
        scatter = scatter + k[..., None] * mu[..., :, None] * mu[..., None, :]
        cov = (scatter + eye) / (k[..., None] + 1)
        t = xs[..., -1]
        a, h = ou_alpha(t)[..., None, None], ou_h(t)[..., None, None]
        prec_in = a**2 * cov + h * eye  # (B, n, d, d)
        v = xs[..., :-1] - a[..., 0] * mu
        return -torch.linalg.solve(prec_in, v[..., None])[..., 0]


@dataclass(frozen=True)
class EmpiricalScore:
    """Exact score of the context's empirical distribution diffused to time t (0 examples: prior)."""

    @property
    def name(self) -> str:
        return "empirical"

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        x0 = context_x0(xs, ys)  # (B, n, d)
        n = xs.shape[1]
        x, t = xs[..., :-1], xs[..., -1]
        a, h = ou_alpha(t)[..., None], ou_h(t)[..., None]  # (B, n, 1)
        diff = x[:, :, None, :] - a[..., None] * x0[:, None, :, :]  # (B, j, i, d)
        logits = -(diff**2).sum(-1) / (2 * h)  # (B, j, i)
        mask = torch.ones(n, n, dtype=torch.bool, device=xs.device).tril(-1)  # i < j
        logits = logits.masked_fill(~mask, -math.inf)
        resp = torch.softmax(logits, -1).nan_to_num(0.0)  # row j = 0 has no context -> 0
        score = -(resp[..., None] * diff).sum(-2) / h
        return torch.where((mask.any(-1))[None, :, None], score, -x)


def prior_start_weights(
    spec: NetSpec, *, generator: torch.Generator | None = None, scale: float = 1.0
) -> Tensor:
    """Weights ``(P,)`` of a bias-free ReLU score network ``[x, t] -> R^d`` whose output is exactly ``-x``.

    ``spec``: depth N >= 2, width K >= 2d, input ``d + 1``, output d, linear output layer. A bias-free ReLU
    network is positively homogeneous, and so is ``-x = relu(-x) - relu(x)``: hidden units ``0..2d-1``
    carry ``relu(x_i)`` and ``relu(-x_i)`` (identity between hidden layers), the output layer reads
    ``-relu(x_i) + relu(-x_i)``. The other ``K - 2d`` units are He-random (times ``scale``) within their own
    block and have zero output weights, so they leave the output at ``-x`` but give GD on the DSM loss
    features of ``(x, t)`` to move.
    """
    d = spec.out_dim
    if spec.in_dim != d + 1 or spec.depth < 2 or spec.width < 2 * d or spec.output != "linear":
        raise InputError(
            f"the prior start needs depth >= 2, width >= 2d = {2 * d}, input d + 1 and a linear output, "
            f"got depth {spec.depth}, width {spec.width}, input {spec.in_dim}, output {spec.output!r}"
        )
    mats = [torch.zeros(V.shape, dtype=torch.float64) for V in unflatten(spec, torch.zeros(spec.num_params))]
    rand = [
        V.to(torch.float64) * scale
        for V in unflatten(
            spec, init_weights(spec, generator=generator, fan_in_scaling=True, dtype=torch.float64)
        )
    ]
    eye = torch.eye(d, dtype=torch.float64)
    free = slice(2 * d, None)
    mats[0][: 2 * d, :d] = torch.cat([eye, -eye])
    mats[0][free] = rand[0][free]
    for V, R in zip(mats[1:-1], rand[1:-1], strict=True):
        V[: 2 * d, : 2 * d] = torch.eye(2 * d, dtype=torch.float64)
        V[free, free] = R[free, free]
    mats[-1][:, : 2 * d] = torch.cat([-eye, eye], 1)
    return flatten(spec, mats)


@dataclass
class GDScore:
    """L steps of GD on the DSM (squared) loss of a bias-free ReLU score network, per prompt and k.

    Network ``NetSpec(depth, width, d + 1, d, "relu", output="linear")`` from one seeded ``w0`` shared by
    all prompts: He-scaled normal (``init="random"``), or
    [`prior_start_weights`][icdl.diffusion.baselines.prior_start_weights] (``init="prior"``: the network
    starts at the prior score ``-x``, with ``init_scale`` on its free units). Risk
    ``(1/(2k)) Σ_i ||f(w, [x_i, t_i]) - y_i||^2`` (eq. 2.2) over the k context pairs, GD by
    [`icdl.nets.reference_gd`][icdl.nets.reference_gd] (batched over prompts). This is what the compiled
    transformer computes in its forward pass for a prompt of k examples (tested). A step that leaves the
    finite numbers gives NaN predictions (a diverged setting loses the held-out selection).
    """

    depth: int = 3
    width: int = 16
    lr: float = 0.03
    steps: int = 10
    seed: int = 0
    ks: Sequence[int] | None = None
    init: Literal["random", "prior"] = "random"
    init_scale: float = 1.0

    @property
    def name(self) -> str:
        tag = "" if self.init == "random" else "p"
        return f"gd{tag}{self.depth}x{self.width}_L{self.steps}"

    @property
    def params(self) -> dict[str, Any]:
        return {"init": self.init, "lr": self.lr, "steps": self.steps, "init_scale": self.init_scale}

    def spec(self, d: int) -> NetSpec:
        return NetSpec(self.depth, self.width, d + 1, d, activation="relu", output="linear")

    def w0(self, d: int, dtype: torch.dtype = torch.float64) -> Tensor:
        """The initial weights ``(P,)`` (seeded)."""
        g = torch.Generator().manual_seed(self.seed)
        if self.init == "prior":
            return prior_start_weights(self.spec(d), generator=g, scale=self.init_scale).to(dtype)
        return init_weights(self.spec(d), generator=g, fan_in_scaling=True, dtype=torch.float64).to(dtype)

    def fit(self, xs: Tensor, ys: Tensor) -> Tensor:
        """``w^(L)`` ``(B, P)`` after GD on each prompt's pairs ``xs (B, k, d+1)``, ``ys (B, k, d)``."""
        spec, w0 = self.spec(ys.shape[-1]), self.w0(ys.shape[-1], xs.dtype).expand(xs.shape[0], -1)
        with torch.no_grad():
            return reference_gd(spec, "squared", w0, xs, ys, lr=self.lr, steps=self.steps)[-1]

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        B, n, d = ys.shape
        spec, w0 = self.spec(d), self.w0(d, xs.dtype).expand(B, -1)
        ks = range(1, n) if self.ks is None else sorted({int(k) for k in self.ks if 0 < int(k) < n})
        preds = torch.full_like(ys, math.nan)
        preds[:, 0] = forward(spec, w0, xs[:, :1])[:, 0]
        for k in ks:
            preds[:, k] = forward(spec, self.fit(xs[:, :k], ys[:, :k]), xs[:, k : k + 1])[:, 0]
        return preds

    def score_fn(self, ctx_xs: Tensor, ctx_ys: Tensor) -> ScoreFn:
        """GD once on one context (``(k, d+1)``, ``(k, d)``) and return the network's score function."""
        spec, w = self.spec(ctx_ys.shape[-1]), self.fit(ctx_xs[None], ctx_ys[None])

        def fn(x: Tensor, t: float) -> Tensor:
            inp = torch.cat([x, torch.full_like(x[:, :1], t)], -1)
            return forward(spec, w.to(x.dtype), inp[None])[0]

        return fn


def _derived_seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint64)[0] >> 1)


Params = list[tuple[Tensor, Tensor]]


@dataclass
class ContextMLP:
    """An N-layer ReLU score network trained on each prompt's context (the context-trained baseline).

    ``s(x, t) = -x + g([x_t, t])`` with ``g: [x_t, t] -> width -> ... -> width -> d`` of ``depth`` linear
    layers (biases, He-normal weights, zero biases, linear output whose weights start at 0): the network
    starts at the prior score ``-x`` and learns the correction (without it, a randomly initialised net
    fitted to k noisy DSM pairs is worse than ``-x`` at every k we tried). Trained by full-batch Adam
    (``lr``) for ``epochs`` steps on the h-weighted DSM loss ``mean_i h_i ||s(x_i, t_i) - y_i||^2`` of
    the k context pairs (defaults from a small grid on held-out prompts, docs/score.md). One network per
    (prompt, k), initialised from a seed derived from ``(seed, k)``; ``ks`` restricts the curve to some
    prefix lengths (others NaN; k = 0 is the prior ``-x``).
    """

    depth: int = 3
    width: int = 64
    lr: float = 3e-4
    epochs: int = 100
    seed: int = 0
    ks: Sequence[int] | None = None

    def __post_init__(self) -> None:
        for key, low in (("depth", 1), ("width", 1), ("epochs", 0)):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise InputError(f"context MLP {key} must be an integer >= {low}, got {v!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"context MLP lr must be a finite number > 0, got {self.lr!r}")

    @property
    def name(self) -> str:
        return f"mlp{self.depth}x{self.width}"

    def init(self, k: int, num: int, d_x: int, d_y: int, dtype: torch.dtype) -> Params:
        """Initial ``[(W (num, fan_in, fan_out), b (num, 1, fan_out))]`` from the seed of ``(seed, k)``."""
        g = torch.Generator().manual_seed(_derived_seed(self.seed, k))
        sizes = [d_x, *([self.width] * (self.depth - 1)), d_y]
        out = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            W = torch.randn(num, fan_in, fan_out, generator=g, dtype=torch.float64) * math.sqrt(2.0 / fan_in)
            out.append((W.to(dtype), torch.zeros(num, 1, fan_out, dtype=dtype)))
        out[-1] = (torch.zeros_like(out[-1][0]), out[-1][1])  # start at the prior score -x
        return out

    @staticmethod
    def apply(params: Params, x: Tensor) -> Tensor:
        """Evaluate the score networks ``-x_t + g([x_t, t])``: ``x (num, m, d + 1) -> (num, m, d)``."""
        hid = x
        for j, (W, b) in enumerate(params):
            hid = torch.baddbmm(b, hid, W)
            if j < len(params) - 1:
                hid = torch.relu(hid)
        return hid - x[..., :-1]

    def fit(self, xs: Tensor, ys: Tensor, k: int | None = None) -> Params:
        """Train one network per prompt on all pairs of ``xs (B, k, d+1)``, ``ys (B, k, d)``."""
        k = xs.shape[1] if k is None else k
        params = [
            (W.requires_grad_(), b.requires_grad_())
            for W, b in self.init(k, xs.shape[0], xs.shape[-1], ys.shape[-1], xs.dtype)
        ]
        opt = torch.optim.Adam([p for pair in params for p in pair], lr=self.lr)
        weight = ou_h(xs[..., -1:])
        with torch.enable_grad():
            for _ in range(self.epochs):
                loss = (weight * (self.apply(params, xs) - ys) ** 2).mean((1, 2)).sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        return [(W.detach(), b.detach()) for W, b in params]

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        n = xs.shape[1]
        ks = range(1, n) if self.ks is None else sorted({int(k) for k in self.ks if 0 < int(k) < n})
        preds = torch.full_like(ys, math.nan)
        preds[:, 0] = -xs[:, 0, :-1]
        for k in ks:
            params = self.fit(xs[:, :k], ys[:, :k], k)
            preds[:, k] = self.apply(params, xs[:, k : k + 1])[:, 0]
        return preds

    def score_fn(self, ctx_xs: Tensor, ctx_ys: Tensor) -> ScoreFn:
        """Fit on one context (``(k, d+1)``, ``(k, d)``) and return its score function."""
        params = self.fit(ctx_xs[None], ctx_ys[None])

        def fn(x: Tensor, t: float) -> Tensor:
            inp = torch.cat([x, torch.full_like(x[:, :1], t)], -1)
            return self.apply(params, inp[None])[0]

        return fn


def score_fn(predictor: Callable[[Tensor, Tensor], Tensor], ctx_xs: Tensor, ctx_ys: Tensor) -> ScoreFn:
    """The score function of a causal predictor given one context ``ctx_xs (k, d+1)``, ``ctx_ys (k, d)``:
    every query ``(x, t)`` is appended to the context as point k and the prediction there is returned."""

    def fn(x: Tensor, t: float) -> Tensor:
        M = x.shape[0]
        q = torch.cat([x, torch.full_like(x[:, :1], t)], -1)[:, None]  # (M, 1, d+1)
        xs = torch.cat([ctx_xs[None].expand(M, -1, -1), q], 1)
        ys = torch.cat([ctx_ys[None].expand(M, -1, -1), torch.zeros_like(x)[:, None]], 1)
        with torch.no_grad():
            return predictor(xs, ys)[:, -1]

    return fn
