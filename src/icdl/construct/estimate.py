"""Memory and time of ``icdl construct`` (compile + verify on one prompt) before anything is built, from
closed-form sizes, per construction variant.

Each variant's sizes and costs are registered by NAME in :data:`ESTIMATES` (no builder is imported: the
estimate must stay cheap and refuse a size before any variant module does work). A variant not listed
shares the paper's layout (:data:`PAPER`). ``ESTIMATES[name].layout`` is what a variant's own
``Variant.sizes()`` would return: its token width D, token count T and sublayers per GD step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from icdl._arith import check_int, safe_float
from icdl.budget import Estimate
from icdl.nets import NetSpec
from icdl.theory import (
    EXACT_LOSS_TERMS,
    EXACT_TERMS,
    Projection,
    embedding_dim,
    readout_sublayers,
    rows_embedding_dim,
    rows_sublayers_per_step,
    rows_tokens,
    sublayers_per_step,
)

__all__ = ["ESTIMATES", "PAPER", "Layout", "VariantEstimate", "construction_estimate"]

# The compiled model's small gathers and per-head matmuls run far below dense-matmul peak: measured
# about 2e9 FLOP/s (icdl construct --depth 6 --width 32 --steps 20, sigmoid: 27 s).
_CONSTRUCT_FLOPS = 2e9


class Layout(NamedTuple):
    """A variant's prompt shape and depth: token width D, tokens T, sublayers per GD step."""

    D: int
    T: int
    per_step: int


@dataclass(frozen=True)
class _Work:
    """What the cost hooks see: sizes shared by every variant."""

    spec: NetSpec
    layout: Layout
    steps: int
    examples: int
    eps: float
    radius: float
    heads: int
    states: int


def _paper_layout(spec: NetSpec, examples: int) -> Layout:
    """Theorem 1's layout: ``D`` of :func:`icdl.theory.embedding_dim`, ``n + 1`` tokens, ``2N + 4``."""
    return Layout(embedding_dim(spec), examples + 1, sublayers_per_step(spec.depth))


def _rows_layout(spec: NetSpec, examples: int) -> Layout:
    """Row tokens: weights in their own tokens (docs/construction.md, "Weights in their own tokens")."""
    return Layout(rows_embedding_dim(spec), rows_tokens(spec, examples), rows_sublayers_per_step(spec))


def _softmax_layout(spec: NetSpec, examples: int) -> Layout:
    """Softmax attention: the paper's token plus a P-wide gradient slot, ``4N + 3`` sublayers per step."""
    return Layout(embedding_dim(spec) + spec.num_params, examples + 1, 4 * spec.depth + 3)


def _paper_mlp(w: _Work, hidden: int) -> tuple[int, int]:
    """(hidden units, MLP FLOPs): dense ``D x hidden`` MLPs on every token and step."""
    return hidden, 2 * w.layout.D * hidden * w.layout.T * w.steps


def _softmax_mlp(w: _Work, hidden: int) -> tuple[int, int]:
    """Every token-local product is a ReLU-sum MLP of ``4 ceil(R / (2 sqrt(eps)))`` units; each unit reads
    a few slots (sparse tables)."""
    units = 4 * math.ceil(min(w.radius / (2 * math.sqrt(w.eps)), 1e15))
    hidden += 2 * (w.spec.num_params + 2 * w.spec.num_units) * units
    mlp_work = 2 * 8 * hidden * w.layout.T * w.steps
    # Building the unit tables is Python work per unit: about 2e-5 s each (measured: 33 s for the
    # 1.6M units of icdl construct --variant softmax -N 3 -K 16 --activation sigmoid --eps 1e-4).
    mlp_work += int(_CONSTRUCT_FLOPS * 2e-5 * hidden)
    return hidden, mlp_work


def _paper_work(w: _Work, mlp_work: int) -> int:
    """FLOPs: every head against every token, forward and backward passes, plus the MLPs."""
    K, T = w.spec.width, w.layout.T
    return w.heads * (max(K, w.spec.in_dim) + 3) * T * T * 2 * (2 * w.steps + 1) + mlp_work


def _rows_work(w: _Work, mlp_work: int) -> int:
    """Row attention pairs each data token with the rows of one layer only: about 16 multiply-adds per
    weight per data token and step (forward, backward, update; traced and untraced passes), plus
    token-local work (measured forward: 7.4e9 FLOPs for N=6, K=64, n=256, L=50)."""
    return 32 * w.steps * (w.examples + 1) * w.spec.num_params + 4 * w.states * w.layout.T * w.layout.D


@dataclass(frozen=True)
class VariantEstimate:
    """One variant's size and cost formulas: its :class:`Layout`, its MLP cost ``(hidden, FLOPs)`` and its
    total FLOPs."""

    layout: Callable[[NetSpec, int], Layout]
    mlp: Callable[[_Work, int], tuple[int, int]] = _paper_mlp
    work: Callable[[_Work, int], int] = _paper_work


PAPER = VariantEstimate(_paper_layout)
# By variant name; compact and no_ewml are counted with the paper's layout (an upper bound within a small
# factor, which is what a refusal needs).
ESTIMATES: dict[str, VariantEstimate] = {
    "paper": PAPER,
    "rows": VariantEstimate(_rows_layout, work=_rows_work),
    "softmax": VariantEstimate(_softmax_layout, mlp=_softmax_mlp),
}


def _fits(spec: NetSpec, loss: str, eps: float, radius: float) -> tuple[Estimate, dict[str, int]]:
    """The ReLU-sum fits a smooth activation or a non-squared loss needs: their estimate and the term
    counts (a non-squared loss is counted at its cap of 1201 terms)."""
    from icdl import relu_sums

    fits = Estimate("icdl construct", 0.0, 0.0)
    kwargs: dict[str, int] = {}
    if any(spec.layer_act(j).name not in EXACT_TERMS for j in range(1, min(spec.depth, 2) + 1)):
        counts = []
        for target in (spec.activation, spec.activation + "'"):
            fit = relu_sums.fit_estimate(target, eps=eps, radius=radius)
            fits = fits + Estimate(fits.what, fit.bytes, fit.seconds, fit.detail)
            counts.append(max(1, math.ceil(min(fit.count or 1.0, 1e15))))
        kwargs.update(r_terms=counts[0], r_prime_terms=counts[1])
    if loss not in EXACT_LOSS_TERMS:
        kwargs["u_terms"] = 1201
        fits = fits + Estimate(fits.what, 600 * 2**20, 10.0, "a two-argument ReLU sum of the loss derivative")
    return fits, kwargs


def construction_estimate(
    spec: NetSpec,
    *,
    loss: str = "squared",
    steps: int,
    examples: int,
    eps: float = 1e-3,
    radius: float = 10.0,
    projection: Projection = "none",
    itemsize: int = 8,
    variant: str = "paper",
) -> Estimate:
    """Memory and time of compiling the construction for ``spec`` and verifying it on one prompt
    (``icdl construct``), from closed-form sizes, before anything is built.

    ``variant`` picks the size formulas (:data:`ESTIMATES`; the paper's for a name not listed). Memory is
    dominated by the verifier's trace: one ``T x D`` state per sublayer, ``per_step L + N+1`` of them, or
    by the compiler's dense ``D x D`` temporaries, plus the stored coefficients of the unique sublayers
    and the ReLU-sum fits. Time is the compiled forward pass's FLOPs a few times over (forward, traced
    forward, per-sublayer checks) at about 2e9 FLOP/s, plus the fits. Term counts of smooth activations
    come from :func:`icdl.relu_sums.fit_estimate`.
    """
    check_int("steps", steps, 0)
    check_int("examples", examples, 1)
    fits, kwargs = _fits(spec, loss, eps, radius)
    ve = ESTIMATES.get(variant, PAPER)
    # Sizes through the closed forms only: no O(N) table is built for a depth that will be refused.
    lay = ve.layout(spec, examples)
    N, K, D, T = spec.depth, spec.width, lay.D, lay.T
    H = max(kwargs.get("r_terms", 1), kwargs.get("r_prime_terms", 2))
    heads = max(K, spec.out_dim, spec.in_dim) * H * N + 2 * spec.num_units
    hidden = (2 * spec.num_params if projection == "box" else 0) + 2 * (3 * spec.num_units + spec.out_dim)
    hidden += spec.out_dim * kwargs.get("u_terms", 2)
    states = lay.per_step * steps + readout_sublayers(N) + 4
    w = _Work(spec, lay, steps, examples, eps, radius, heads, states)
    hidden, mlp_work = ve.mlp(w, hidden)
    # Coefficients of one block + readout: per head its query/key/value entries (<= fan-in + 3), per MLP
    # unit a few entries; the update sublayer writes P weights.
    coeffs = heads * (max(K, spec.in_dim) + 3) * 2 + 4 * hidden + 2 * spec.num_params
    trace = states * T * D * itemsize
    work = ve.work(w, mlp_work)
    # Compiling holds a few dense D x D float64 temporaries (measured: peak ~ 2.7 D^2 x 8 bytes for
    # N=3, K=32..96); counted as 3 D^2 x 8.
    compile_bytes = 3 * D * D * 8
    est = Estimate(
        "icdl construct",
        safe_float(trace + compile_bytes + 3 * coeffs * itemsize + 8 * T * D * itemsize + 300 * 2**20),
        1.0 + safe_float(work) * 1.2 / _CONSTRUCT_FLOPS + safe_float(trace) / 1e9,
        f"{states} traced states of {T} tokens x D={D} ({'float64' if itemsize == 8 else 'float32'})",
    )
    return est + fits
