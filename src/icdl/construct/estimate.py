"""Memory and time of ``icdl construct`` (compile + verify on one prompt) before anything is built, from
closed-form sizes, per construction variant.

Each variant states its own sizes and costs (``Variant.sizes``, ``Variant.costs``;
[`icdl.construct.sizes`][icdl.construct.sizes]): this module looks them up through the registry
([`icdl.construct.variants`][icdl.construct.variants]) and calls only those closed forms: no builder runs, so
a size is refused before any variant does work. A name not registered gets the paper's sizes and costs.
"""

from __future__ import annotations

import math

from icdl._arith import check_int, safe_float
from icdl.budget import Estimate
from icdl.construct.sizes import CONSTRUCT_FLOPS, DENSE_COSTS, CostInputs, paper_sizes
from icdl.construct.variants import VARIANTS
from icdl.nets import NetSpec
from icdl.theory import EXACT_LOSS_TERMS, EXACT_TERMS, Projection, readout_sublayers

__all__ = ["construction_estimate"]


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

    ``variant`` picks the size and cost formulas (``Variant.sizes``, ``Variant.costs`` of the registered
    variant; the paper's for a name not registered). Memory is
    dominated by the verifier's trace: one ``T x D`` state per sublayer, ``per_step L + N+1`` of them, or
    by the compiler's dense ``D x D`` temporaries, plus the stored coefficients of the unique sublayers
    and the ReLU-sum fits. Time is the compiled forward pass's FLOPs a few times over (forward, traced
    forward, per-sublayer checks) at about 2e9 FLOP/s, plus the fits. Term counts of smooth activations
    come from [`icdl.relu_sums.fit_estimate`][icdl.relu_sums.fit_estimate].
    """
    check_int("steps", steps, 0)
    check_int("examples", examples, 1)
    fits, kwargs = _fits(spec, loss, eps, radius)
    v = VARIANTS.get(variant)
    sizes, costs = (paper_sizes, DENSE_COSTS) if v is None else (v.sizes, v.costs)
    # Sizes through the closed forms only: no O(N) table is built for a depth that will be refused.
    lay = sizes(spec, examples)
    N, K, D, T = spec.depth, spec.width, lay.D, lay.T
    H = max(kwargs.get("r_terms", 1), kwargs.get("r_prime_terms", 2))
    heads = max(K, spec.out_dim, spec.in_dim) * H * N + 2 * spec.num_units
    hidden = (2 * spec.num_params if projection == "box" else 0) + 2 * (3 * spec.num_units + spec.out_dim)
    hidden += spec.out_dim * kwargs.get("u_terms", 2)
    states = lay.per_step * steps + readout_sublayers(N) + 4
    w = CostInputs(spec, lay, steps, examples, eps, radius, heads, states)
    hidden, mlp_work = costs.mlp(w, hidden)
    # Coefficients of one block + readout: per head its query/key/value entries (<= fan-in + 3), per MLP
    # unit a few entries; the update sublayer writes P weights.
    coeffs = heads * (max(K, spec.in_dim) + 3) * 2 + 4 * hidden + 2 * spec.num_params
    trace = states * T * D * itemsize
    work = costs.work(w, mlp_work)
    # Compiling holds a few dense D x D float64 temporaries (measured: peak ~ 2.7 D^2 x 8 bytes for
    # N=3, K=32..96); counted as 3 D^2 x 8.
    compile_bytes = 3 * D * D * 8
    est = Estimate(
        "icdl construct",
        safe_float(trace + compile_bytes + 3 * coeffs * itemsize + 8 * T * D * itemsize + 300 * 2**20),
        1.0 + safe_float(work) * 1.2 / CONSTRUCT_FLOPS + safe_float(trace) / 1e9,
        f"{states} traced states of {T} tokens x D={D} ({'float64' if itemsize == 8 else 'float32'})",
    )
    return est + fits
