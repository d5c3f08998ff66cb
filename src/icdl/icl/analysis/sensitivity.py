"""Predictions at one query and their sensitivities: ``d ŷ / d y_i`` (context labels) and ``d ŷ / d x_query``.

The quantities von Oswald et al. (2023, "Transformers learn in-context by gradient descent", Sec. 3) compare
between a trained transformer and GD: two in-context learners that run the same algorithm agree in their
predictions AND in how those predictions move when a context label or the query moves.

A *point predictor* maps a prompt of ``k + 1`` points, ``xs (B, k+1, d_x)``, ``ys (B, k+1, d_y)``, to its
prediction for the last point, ``(B, d_y)``, using ``x_0, y_0, ..., x_{k-1}, y_{k-1}, x_k`` only
(``ys[:, k]`` is never read). Adapters:

* [`last_point`][icdl.icl.analysis.sensitivity.last_point] — any predictor with the ICL model's signature (the
  ICL transformer, the baselines of [`icdl.icl.baselines.simple`][icdl.icl.baselines.simple] and
  [`icdl.icl.baselines.kernel`][icdl.icl.baselines.kernel]): its prediction at position k;
* [`gd_predictions`][icdl.icl.analysis.sensitivity.gd_predictions] — L-step GD on the target architecture
  (paper eq. 2.2-2.3, the Lemma 1 gradient of [`icdl.nets.gradient`][icdl.nets.gradient]) from a shared
  ``w0``, for several step sizes and step counts from one trajectory each;
* [`compiled_prediction`][icdl.icl.analysis.sensitivity.compiled_prediction] — a compiled GD transformer
  ([`compile_gd_transformer`][icdl.construct.compile.compile_gd_transformer], compiled for n = k examples),
  run with autograd on.

[`sensitivities`][icdl.icl.analysis.sensitivity.sensitivities] differentiates a batch of predictions by
batched autograd: the prompts of a batch do not interact, so the gradient of the SUM over prompts of output c
with respect to ``ys`` is, prompt by prompt, that prompt's Jacobian row (the tests check this against
per-prompt finite differences and the ridge smoother's closed form).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from icdl import nets
from icdl.errors import InputError

__all__ = [
    "PointPredictor",
    "Sensitivity",
    "compiled_prediction",
    "gd_predictions",
    "last_point",
    "leaves",
    "sensitivities",
]

PointPredictor = Callable[[Tensor, Tensor], Tensor]
"""``fn(xs (B, k+1, d_x), ys (B, k+1, d_y)) -> (B, d_y)``: the prediction for the last point."""


@dataclass(frozen=True)
class Sensitivity:
    """One predictor's outputs on a batch of ``(k+1)``-point prompts.

    ``pred (B, d_y)``; ``d_y (B, d_y * k * d_y)``: ``d ŷ_c / d y_{i,c'}`` flattened over ``(c, i, c')``;
    ``d_x (B, d_y * d_x)``: ``d ŷ_c / d x_{query}``; all float64 and detached.
    """

    pred: Tensor
    d_y: Tensor
    d_x: Tensor


def leaves(xs: Tensor, ys: Tensor, dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """Fresh copies of a prompt batch in ``dtype`` that require grad (the inputs to differentiate by)."""
    return xs.detach().to(dtype).requires_grad_(True), ys.detach().to(dtype).requires_grad_(True)


def sensitivities(preds: Sequence[Tensor], xs: Tensor, ys: Tensor) -> list[Sensitivity]:
    """Sensitivities of each prediction ``(B, d_y)`` in ``preds``, computed from the leaves ``xs (B, k+1,
    d_x)``, ``ys (B, k+1, d_y)``, by one backward pass per prediction and output dimension.

    Returns one [`Sensitivity`][icdl.icl.analysis.sensitivity.Sensitivity] per prediction. A prediction that
    does not depend on ``xs`` or ``ys`` at all (e.g. averaging, for ``x``) gets zeros. Raises InputError when
    a prediction reads the query's own label ``ys[:, k]`` (a non-causal predictor).
    """
    k = xs.shape[1] - 1
    out = []
    for p in preds:
        if p.dim() != 2 or p.shape[0] != xs.shape[0]:
            raise InputError(f"a point prediction must have shape (B, d_y), got {tuple(p.shape)}")
        gys, gxs = [], []
        for c in range(p.shape[1]):
            if not p.requires_grad:
                gx, gy = torch.zeros_like(xs), torch.zeros_like(ys)
            else:
                gx, gy = torch.autograd.grad(p[:, c].sum(), (xs, ys), retain_graph=True, allow_unused=True)
                gx = torch.zeros_like(xs) if gx is None else gx
                gy = torch.zeros_like(ys) if gy is None else gy
            if bool((gy[:, k] != 0).any()):
                raise InputError("the predictor reads the query's own label (not causal)")
            gys.append(gy[:, :k].reshape(xs.shape[0], -1))
            gxs.append(gx[:, k])
        out.append(
            Sensitivity(
                p.detach().double(),
                torch.cat(gys, 1).detach().double(),
                torch.cat(gxs, 1).detach().double(),
            )
        )
    return out


def last_point(model: Any) -> PointPredictor:
    """The point predictor of a sequence predictor ``model(xs, ys) -> (B, n, d_y)`` (causal): its output at
    the last position, computed in the dtype of the model's inputs as given. A model with its own
    ``predict_last(xs, ys) -> (B, d_y)`` (one that computes the last position alone, e.g.
    [`MLPTunedBaseline`][icdl.icl.baselines.mlp_tuned.MLPTunedBaseline], differentiable through its training)
    is used through it."""
    own = getattr(model, "predict_last", None)
    if callable(own):
        return own  # type: ignore[no-any-return]

    def fn(xs: Tensor, ys: Tensor) -> Tensor:
        return model(xs, ys)[:, -1]

    return fn


def gd_predictions(
    spec: nets.NetSpec,
    w0: Tensor,
    xs: Tensor,
    ys: Tensor,
    *,
    lrs: Sequence[float],
    steps: Sequence[int],
    loss: str = "squared",
) -> dict[tuple[float, int], Tensor]:
    """``f(w_L, x_k)`` of GD on the first k points for every step size in ``lrs`` and every L in ``steps``.

    ``w_l = w_{l-1} - lr ∇L_k(w_{l-1})``, ``L_k(w) = (1/(2k)) Σ_{i<k} l(f(w, x_i), y_i)`` (eq. 2.2-2.3),
    from ``w0 (P,)`` for every prompt — the same map as
    [`GDBaseline`][icdl.icl.baselines.simple.GDBaseline] at position k. One trajectory per step size, read off
    after each L (so the cost is ``len(lrs) · max(steps)`` steps). Differentiable in ``xs`` and ``ys``.
    Returns ``{(lr, L): (B, d_y)}``.
    """
    if xs.shape[1] < 2:
        raise InputError("GD needs at least one context example (k >= 1)")
    B = xs.shape[0]
    xk, yk, xq = xs[:, :-1], ys[:, :-1], xs[:, -1:]
    wanted = sorted(set(int(s) for s in steps))
    out: dict[tuple[float, int], Tensor] = {}
    for lr in lrs:
        w = w0.to(xs.dtype).expand(B, -1)
        for step in range(1, wanted[-1] + 1):
            w = w - float(lr) * nets.gradient(spec, loss, w, xk, yk)
            if step in wanted:
                out[(float(lr), step)] = nets.forward(spec, w, xq)[:, 0]
    return out


def compiled_prediction(model: Any, w0: Tensor, xs: Tensor, ys: Tensor) -> Tensor:
    """The compiled GD transformer's prediction ``f(w^(L), x_k)`` for prompts of ``k + 1`` points, with
    autograd on (the same sublayers as ``CompiledModel.run(H, grad=True)``: L blocks, then the readout).
    ``model`` must be compiled for ``n = k`` examples."""
    k = xs.shape[1] - 1
    H = model.build_prompt(xs[:, :k], ys[:, :k], xs[:, k], w0)
    model.check_prompt(H)
    for _ in range(model.steps):
        for layer in model.block_layers:
            H = layer(H)
    for layer in model.readout_layers:
        H = layer(H)
    return model.read_prediction(H)
