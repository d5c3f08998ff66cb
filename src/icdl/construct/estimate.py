"""Memory and time of ``icdl construct`` (compile + verify on one prompt) before anything is built, from
closed-form sizes, per construction variant.

Each variant states its own sizes and costs (``Variant.sizes``, ``Variant.costs``;
[`icdl.construct.engine.sizes`][icdl.construct.engine.sizes]): this module looks them up through the registry
([`icdl.construct.variants.registry`][icdl.construct.variants.registry]) and calls only those closed forms: no
builder runs, so a size is refused before any variant does work. A name not registered gets the paper's sizes
and costs.
"""

from __future__ import annotations

import math

from icdl import relu_sums
from icdl._arith import check_int, safe_float
from icdl.budget import Estimate
from icdl.construct.engine.sizes import CONSTRUCT_FLOPS, DENSE_COSTS, CostInputs, paper_sizes
from icdl.construct.variants.registry import VARIANTS
from icdl.nets import NetSpec
from icdl.theory import EXACT_LOSS_TERMS, EXACT_TERMS, Projection, readout_sublayers

__all__ = [
    "HVP_FLOPS",
    "LIPSCHITZ_HVPS",
    "STREAM_STATES",
    "SUBLAYER_SECONDS",
    "TRAJECTORIES",
    "construction_estimate",
    "lipschitz_hvps",
]

# States of T x D the streaming check holds at once, with the sublayer's own output and temporaries
# (measured peaks: docs/results/verify_scale.json), unless the variant states its own (``Costs.states``).
STREAM_STATES = 8
# P-vectors per GD step held at the report: the transformer's and reference GD's weight trajectories, their
# stacked copy and the difference's temporaries.
TRAJECTORIES = 5
# Hessian-vector products of the default L_f estimate at most: 20 at the first point, 5 at each of 7 more
# (icdl.construct.check.verify.LIPSCHITZ_POINTS), plus one gradient per point; fewer when there are fewer
# points (`lipschitz_hvps`).
LIPSCHITZ_HVPS = 20 + 7 * 5 + 8
# FLOP/s of the L_f estimate's Hessian-vector products: batched matrix products (measured 0.4 s per product
# for N=2, K=d_x=3200, n=64: 10 n P = 6.5e9 FLOPs), far above the compiled sublayers' CONSTRUCT_FLOPS.
HVP_FLOPS = 1.6e10


def lipschitz_hvps(steps: int) -> int:
    """Hessian-vector products (and gradients) of the default L_f estimate for ``steps`` GD steps: at most
    20 + 1 at the first point and 5 + 1 at each later one, over the ``2 (L + 1) - 1`` distinct trajectory
    points (w0 starts both) or 8 of them (``icdl.construct.check.verify.LIPSCHITZ_POINTS``); 0 without
    steps."""
    if steps <= 0:
        return 0
    points = min(2 * (steps + 1) - 1, 8)
    return 21 + 6 * (points - 1)


# Fixed cost of one sublayer, whatever its size: the untraced and the checked forward's module calls and
# the comparison's Python work (measured 0.7 ms per sublayer for NetSpec(2, 2, 2, 1), n = 3, L = 200 and
# 2,000: 3.8 s and 14.3 s). Without it a deep-but-tiny run (L = 10^6) would be estimated at seconds.
SUBLAYER_SECONDS = 1e-3


def _fits(spec: NetSpec, loss: str, eps: float, radius: float) -> tuple[Estimate, dict[str, int]]:
    """The ReLU-sum fits a smooth activation or a non-squared loss needs: their estimate and the term
    counts (a non-squared loss is counted at its cap of 1201 terms)."""
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

    ``variant`` picks the size and cost formulas (``Variant.sizes``, ``Variant.costs`` of the registered
    variant; the paper's for a name not registered).

    Memory: the verifier checks every sublayer as the model runs
    ([`icdl.construct.check.stream`][icdl.construct.check.stream]), so it holds a few ``T x D`` states (the
    prompt, the state before and after the sublayer, the sublayer's own output buffer and temporaries: the
    variant's ``Costs.states``, else `STREAM_STATES`), the two weight trajectories, their stacked copy and
    differences (`TRAJECTORIES` ``(L+1) x P`` in the model's dtype), the stored coefficients and cached
    gather plans of the unique sublayers (``Costs.coefficients``), the ReLU-sum fits, and the interpreter
    with torch (300 MiB).
    Time: the compiled forward's FLOPs a few times over (the untraced forward, the checked forward, the
    per-sublayer comparisons) at about 2e9 FLOP/s, the L_f estimate's Hessian-vector products, a fixed
    `SUBLAYER_SECONDS` per checked sublayer, plus the fits. Term counts of smooth activations come from
    [`icdl.relu_sums.fit_estimate`][icdl.relu_sums.fit_estimate].
    """
    check_int("steps", steps, 0)
    check_int("examples", examples, 1)
    fits, kwargs = _fits(spec, loss, eps, radius)
    v = VARIANTS.get(variant)
    sizes, costs = (paper_sizes, DENSE_COSTS) if v is None else (v.sizes, v.costs)
    # Sizes through the closed forms only: no O(N) table is built for a depth that will be refused.
    lay = sizes(spec, examples)
    N, K, D, T, P = spec.depth, spec.width, lay.D, lay.T, spec.num_params
    H = max(kwargs.get("r_terms", 1), kwargs.get("r_prime_terms", 2))
    heads = max(K, spec.out_dim, spec.in_dim) * H * N + 2 * spec.num_units
    hidden = (2 * spec.num_params if projection == "box" else 0) + 2 * (3 * spec.num_units + spec.out_dim)
    hidden += spec.out_dim * kwargs.get("u_terms", 2)
    states = lay.per_step * steps + readout_sublayers(N) + 4
    w = CostInputs(spec, lay, steps, examples, eps, radius, heads, states)
    hidden, mlp_work = costs.mlp(w, hidden)
    # Coefficients of one block + readout: per head its query/key/value entries (<= fan-in + 3), per MLP
    # unit a few entries; the update sublayer writes P weights.
    if costs.coefficients is not None:
        coeffs = costs.coefficients(w)
    else:
        coeffs = heads * (max(K, spec.in_dim) + 3) * 2 + 4 * hidden + 2 * spec.num_params
    held = (STREAM_STATES if costs.states is None else costs.states) * T * D * itemsize
    trajectories = TRAJECTORIES * (steps + 1) * P * itemsize  # in the model's dtype
    work = costs.work(w, mlp_work)
    # L_f: `lipschitz_hvps` Hessian-vector products (and a gradient per point), ~10 n P FLOPs each
    lipschitz = lipschitz_hvps(steps) * 10 * examples * P
    est = Estimate(
        "icdl construct",
        safe_float(held + trajectories + 3 * coeffs * itemsize + 300 * 2**20),
        1.0
        + safe_float(work) * 1.2 / CONSTRUCT_FLOPS
        + safe_float(lipschitz) * 1.2 / HVP_FLOPS
        + safe_float(states * T * D * itemsize) / 1e9
        + safe_float(states) * SUBLAYER_SECONDS,
        f"{states} sublayers checked as they run on {T} tokens x D={D} "
        f"({'float64' if itemsize == 8 else 'float32'}); weight trajectories {steps + 1} x P={P}",
    )
    return est + fits
