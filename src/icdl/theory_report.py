"""The ``icdl theory`` report: every size, bound and FLOP count of [`icdl.theory`][icdl.theory] for one
network, as one JSON-ready dict (keys documented in docs/theory.md), and its memory/time estimate.

[`compute`][icdl.theory_report.compute] fits the ReLU sums a smooth activation or a non-squared loss needs
([`icdl.relu_sums`][icdl.relu_sums]), then evaluates the closed forms of [`icdl.theory`][icdl.theory] and
[`icdl.theory_bounds`][icdl.theory_bounds]: the sizes and per-sublayer tables (`_sizes`), Lemmas 2-6, Theorem
1 and Corollary 1.1 (`_bounds`) and the FLOP counts (`_flops`).
"""

from __future__ import annotations

from typing import Any

from icdl import relu_sums
from icdl._arith import safe_div, safe_float
from icdl.budget import Estimate
from icdl.nets import NetSpec, get_loss
from icdl.theory import (
    EXACT_LOSS_TERMS,
    EXACT_TERMS,
    Projection,
    TermCounts,
    block_table,
    direct_gd_flops,
    embedding_dim,
    embedding_dim_as_printed,
    embedding_dim_closed_form,
    embedding_dim_leading_terms,
    embedding_dim_paper_bound,
    max_heads,
    model_flops,
    paper_construction_flops,
    paper_direct_flops,
    readout_sublayers,
    readout_table,
    sublayers,
    sublayers_per_step,
    term_counts,
)
from icdl.theory_bounds import (
    Lemma6Constants,
    Theorem1Constants,
    activation_bounds,
    corollary11_as_printed,
    corollary11_bound,
    corollary11_loose,
    lemma2_E_r,
    lemma2_layer_factors,
    lemma3_error,
    lemma4_error,
    lemma6_constants,
    loss_derivative_bound,
    theorem1_constants,
)

__all__ = ["compute", "compute_estimate"]


def _fitted_counts(
    spec: NetSpec, loss: str, eps: float, radius: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fit the non-exact sums with icdl.relu_sums; return (kwargs for term_counts, sums info for output)."""
    kwargs: dict[str, Any] = {}
    info: dict[str, Any] = {}
    needs_act = any(spec.layer_act(j).name not in EXACT_TERMS for j in range(1, spec.depth + 1))
    needs_loss = loss not in EXACT_LOSS_TERMS
    if not (needs_act or needs_loss):
        return kwargs, info

    if needs_act:
        r = relu_sums.relu_sum_for(spec.activation, eps=eps, radius=radius)
        rp = relu_sums.relu_sum_for(spec.activation + "'", eps=eps, radius=radius)
        kwargs.update(r_terms=r.num_terms, r_prime_terms=rp.num_terms)
        info["r"], info["r_prime"] = _sum_info(r.to_dict()), _sum_info(rp.to_dict())
    if needs_loss:
        u = relu_sums.loss_derivative_sum(loss, eps=eps, radius=radius)
        kwargs["u_terms"] = u.num_terms
        info["u"] = _sum_info(u.to_dict())
    return kwargs, info


def _sum_info(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != "terms"}


def _sizes(
    spec: NetSpec, terms: TermCounts, *, steps: int, projection: Projection, sums: dict[str, Any]
) -> dict[str, Any]:
    """The size part of the report: parameters, units, sublayers, token width (every variant of the
    count), heads, MLP width, term counts, fitted sums and the per-sublayer tables."""
    N, K = spec.depth, spec.width
    block = block_table(spec, terms, projection)
    readout = readout_table(spec, terms)
    return {
        "num_params": spec.num_params,
        "num_units": spec.num_units,
        "sublayers": sublayers(N, steps),
        "sublayers_per_step": sublayers_per_step(N),
        "readout_sublayers": readout_sublayers(N),
        "total_sublayers": sublayers(N, steps) + readout_sublayers(N),
        "embedding_dim": embedding_dim(spec),
        "embedding_dim_closed_form": (
            embedding_dim_closed_form(N, K, spec.in_dim) if spec.in_dim == spec.out_dim else None
        ),
        "embedding_dim_as_printed": embedding_dim_as_printed(spec),
        "embedding_dim_paper_bound": embedding_dim_paper_bound(spec),
        "embedding_dim_leading_terms": embedding_dim_leading_terms(spec),
        "max_heads": max_heads(spec, terms),
        "max_mlp_hidden": max(s.hidden for s in block + readout),
        "terms": {"r": list(terms.r), "r_prime": list(terms.r_prime), "u": list(terms.u)},
        "relu_sums": sums,
        "per_sublayer": [{"index": i + 1, **s.to_dict()} for i, s in enumerate(block)],
        "readout": [{"index": i + 1, **s.to_dict()} for i, s in enumerate(readout)],
    }


def _corollary11(
    *, grad_eps: float, lr: float, grad_lipschitz: float, steps: int, examples: int
) -> dict[str, Any]:
    """Corollary 1.1's accumulated error after L steps: corrected, loose and as printed."""
    return {
        "L_f": grad_lipschitz,
        "eps": grad_eps,
        "corrected": corollary11_bound(eps=grad_eps, lr=lr, lipschitz_f=grad_lipschitz, steps=steps),
        "loose": corollary11_loose(eps=grad_eps, lr=lr, lipschitz_f=grad_lipschitz, steps=steps),
        "as_printed": corollary11_as_printed(
            eps=grad_eps, examples=examples, lipschitz_f=grad_lipschitz, steps=steps
        ),
    }


def _lemma6_theorem1(
    l6: Lemma6Constants, t1: Theorem1Constants, *, eps_r: float, eps_rp: float, eps_l: float, grad_eps: float
) -> dict[str, Any]:
    """Lemma 6's and Theorem 1's constants and the errors they give for the measured sum errors."""
    return {
        "lemma6": {
            "P": l6.P,
            "B_s": l6.B_s,
            "E_s_r": l6.E_s_r,
            "E_s_r_prime": l6.E_s_r_prime,
            "E_s_l": l6.E_s_l,
            "error": l6.error(eps_r=eps_r, eps_r_prime=eps_rp, eps_l=eps_l),
        },
        "theorem1": {
            "C_l": t1.C_l,
            "C_r": t1.C_r,
            "C_r_prime": t1.C_r_prime,
            "grad_eps": grad_eps,
            "split": t1.split(grad_eps),
            "grad_error_bound": t1.grad_error(eps_r=eps_r, eps_r_prime=eps_rp, eps_l=eps_l),
        },
    }


def _bounds(
    spec: NetSpec,
    sums: dict[str, Any],
    *,
    loss: str,
    steps: int,
    examples: int,
    lr: float,
    radius: float,
    bound_x: float,
    bound_y: float,
    bound_v: float,
    grad_lipschitz: float,
    grad_eps: float,
    corrected_bounds: bool,
) -> dict[str, Any]:
    """The ``bounds`` part of the report: Lemmas 2-6, Theorem 1 and Corollary 1.1 for the measured
    sum-of-ReLU errors (docs/theory.md)."""
    # Sum-of-ReLU errors: the measured sup error of each fitted sum; exact sums (relu, identity, squared
    # loss) contribute 0 (relu' is exact outside its delta-window, docs/paper.md, sublayers).
    eps_r = sums["r"]["sup_error"] if "r" in sums else 0.0
    eps_rp = sums["r_prime"]["sup_error"] if "r_prime" in sums else 0.0
    eps_l = sums["u"]["sup_error"] if "u" in sums else 0.0
    acts = [spec.layer_act(j) for j in range(1, spec.depth + 1)]
    L_r = max(a.lipschitz for a in acts)
    L_rp = max(a.deriv_lipschitz for a in acts)
    L_l = get_loss(loss).deriv_lipschitz
    ab = activation_bounds(spec, bound_x=bound_x, bound_v=bound_v, corrected=corrected_bounds)
    E_r = lemma2_E_r(spec, lipschitz_r=L_r, bound_v=bound_v)
    B_l = loss_derivative_bound(loss, bound_t=ab.B_r[-1], bound_y=bound_y)
    l6 = lemma6_constants(
        spec,
        E_r=E_r,
        B_r_prime=ab.max_r_prime,
        B_l=B_l,
        bound_v=bound_v,
        lipschitz_r_prime=L_rp,
        lipschitz_l=L_l,
    )
    t1 = theorem1_constants(spec, l6, B_r=ab.max_r, E_r=E_r)
    ranges = {
        "R_1": max(bound_v * ab.max_r, 1.0),
        "R_2": max(bound_v * ab.max_r_prime, 1.0),
        "R_3": max(bound_v * ab.max_r, bound_y, 1.0),
    }
    assumptions = {"B_x": bound_x, "B_y": bound_y, "B_v": bound_v, "L_r": L_r, "L_r_prime": L_rp, "L_l": L_l}
    return {
        "assumptions": {**assumptions, "corrected": corrected_bounds},
        "B_r_layers": list(ab.B_r),
        "B_r_prime_layers": list(ab.B_r_prime),
        "B_r": ab.max_r,
        "B_r_prime": ab.max_r_prime,
        "B_l": B_l,
        "required_ranges": ranges,
        "range_sufficient": all(radius >= v for v in ranges.values()),
        "sum_errors": {"eps_r": eps_r, "eps_r_prime": eps_rp, "eps_l": eps_l},
        "lemma2_layer_factors": list(lemma2_layer_factors(spec, lipschitz_r=L_r, bound_v=bound_v)),
        "E_r": E_r,
        "lemma2_error": E_r * eps_r,
        "lemma3_error": lemma3_error(
            eps_r_prime=eps_rp, eps_r=eps_r, lipschitz_r_prime=L_rp, bound_v=bound_v, E_r=E_r
        ),
        "lemma4_error": lemma4_error(eps_l=eps_l, eps_r=eps_r, lipschitz_l=L_l, E_r=E_r),
        **_lemma6_theorem1(l6, t1, eps_r=eps_r, eps_rp=eps_rp, eps_l=eps_l, grad_eps=grad_eps),
        "corollary11": _corollary11(
            grad_eps=grad_eps, lr=lr, grad_lipschitz=grad_lipschitz, steps=steps, examples=examples
        ),
    }


def _flops(
    spec: NetSpec, terms: TermCounts, *, steps: int, examples: int, eps: float, projection: Projection
) -> dict[str, Any]:
    """The ``flops`` part of the report: the compiled model's exact forward FLOPs, direct GD, and the
    paper's asymptotic counts (App. A.3)."""
    N, K = spec.depth, spec.width
    flops = model_flops(spec, terms, examples=examples, steps=steps, projection=projection)
    direct = direct_gd_flops(spec, examples=examples, steps=steps)
    return {
        "compiled_forward": flops["total"],
        "compiled_per_block": flops["per_block"],
        "compiled_readout": flops["readout"],
        "direct_gd": direct,
        "ratio_compiled_to_direct": safe_div(safe_float(flops["total"]), safe_float(direct))
        if direct
        else None,
        "paper_construction": paper_construction_flops(
            examples=examples, steps=steps, depth=N, width=K, eps=eps
        ),
        "paper_direct": paper_direct_flops(examples=examples, steps=steps, depth=N, width=K),
    }


def compute(
    spec: NetSpec,
    *,
    loss: str,
    steps: int,
    examples: int,
    lr: float,
    eps: float,
    radius: float,
    projection: Projection,
    bound_x: float,
    bound_y: float,
    bound_v: float,
    grad_lipschitz: float,
    grad_eps: float,
    corrected_bounds: bool,
) -> dict[str, Any]:
    """Everything ``icdl theory`` reports, as one JSON-ready dict (keys documented in docs/theory.md).

    Fits the ReLU sums a smooth activation or a non-squared loss needs (``eps`` on ``[-radius, radius]``)
    and evaluates every size, bound and FLOP count of [`icdl.theory`][icdl.theory] for ``spec``. Cost: O(N) in
    the depth (the per-sublayer table); [`compute_estimate`][icdl.theory_report.compute_estimate] gives its
    memory and time beforehand.
    """
    kwargs, sums = _fitted_counts(spec, loss, eps, radius)
    terms = term_counts(spec, loss, **kwargs)
    sizes = _sizes(spec, terms, steps=steps, projection=projection, sums=sums)
    bounds = _bounds(
        spec,
        sums,
        loss=loss,
        steps=steps,
        examples=examples,
        lr=lr,
        radius=radius,
        bound_x=bound_x,
        bound_y=bound_y,
        bound_v=bound_v,
        grad_lipschitz=grad_lipschitz,
        grad_eps=grad_eps,
        corrected_bounds=corrected_bounds,
    )
    network = {**spec.to_dict(), "loss": loss}
    run = {"steps": steps, "examples": examples, "tokens": examples + 1, "lr": lr, "eps": eps}
    return {
        "network": network,
        **run,
        "range": radius,
        "projection": projection,
        **sizes,
        "bounds": bounds,
        "flops": _flops(spec, terms, steps=steps, examples=examples, eps=eps, projection=projection),
    }


def compute_estimate(
    spec: NetSpec, *, loss: str = "squared", eps: float = 1e-3, radius: float = 10.0
) -> Estimate:
    """Memory and time of [`compute`][icdl.theory_report.compute] (and of printing its result), before running
    it.

    Its cost is linear in the depth N: ``3N + 5`` rows of the per-sublayer tables and ``4N`` per-layer
    bounds (about 4 KB and 0.4 ms per layer, measured with ``icdl theory --depth 100000 --json``), and
    ``d_y`` loss-term counts (about 30 B and 6 us each, ``--out-dim 1000000``; counted as 100 B, 10 us),
    plus the ReLU-sum fits of a smooth activation or non-squared loss
    ([`icdl.relu_sums.fit_estimate`][icdl.relu_sums.fit_estimate]).
    """
    N, dy = spec.depth, spec.out_dim
    est = Estimate(
        "icdl theory",
        200 * 2**20 + 4e3 * N + 100 * dy,
        1.0 + 4e-4 * N + 1e-5 * dy,
        f"N={N}: {3 * N + 5} table rows; d_y={dy} loss-term counts",
    )
    act = spec.activation
    if any(spec.layer_act(j).name not in EXACT_TERMS for j in (1, N)):
        for target in (act, act + "'"):
            fit = relu_sums.fit_estimate(target, eps=eps, radius=radius)
            est = est + Estimate(est.what, fit.bytes, fit.seconds, fit.detail)
    if loss not in EXACT_LOSS_TERMS:
        est = est + Estimate(est.what, 600 * 2**20, 10.0, "a two-argument ReLU sum of the loss derivative")
    return est
