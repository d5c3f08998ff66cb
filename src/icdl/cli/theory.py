"""``icdl theory``: the paper's sizes, head counts, error bounds and FLOPs for one network spec.

Example::

    icdl theory --depth 3 --width 5 --in-dim 4 --out-dim 2 --steps 3
    icdl theory --depth 4 --width 20 --in-dim 20 --out-dim 1 --steps 10 --activation sigmoid --json

All numbers come from :mod:`icdl.theory`; term counts of smooth activations come from fitted sums
(:func:`icdl.relu_sums.relu_sum_for` with ``--eps`` and ``--range``). docs/theory.md explains every field.
"""

from __future__ import annotations

import math
from typing import Any

import click

from icdl.cli._common import POSITIVE_FLOAT, emit_json, user_error
from icdl.nets import ACTIVATIONS, LOSSES, NetSpec, get_activation, get_loss


def _fitted_counts(
    spec: NetSpec, loss: str, eps: float, radius: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fit the non-exact sums with icdl.relu_sums; return (kwargs for term_counts, sums info for output)."""
    from icdl import theory

    kwargs: dict[str, Any] = {}
    info: dict[str, Any] = {}
    needs_act = any(spec.layer_act(j).name not in theory.EXACT_TERMS for j in range(1, spec.depth + 1))
    needs_loss = loss not in theory.EXACT_LOSS_TERMS
    if not (needs_act or needs_loss):
        return kwargs, info
    try:
        from icdl import relu_sums
    except ImportError as exc:
        raise user_error(
            f"activation {spec.activation!r} / loss {loss!r} need fitted ReLU sums, but icdl.relu_sums "
            f"is unavailable ({exc})"
        ) from None
    missing = [
        name
        for name, needed in (("relu_sum_for", needs_act), ("loss_derivative_sum", needs_loss))
        if needed and not hasattr(relu_sums, name)
    ]
    if missing:
        raise user_error(f"icdl.relu_sums has no {', '.join(missing)} yet; cannot count the fitted terms")
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


def compute(
    spec: NetSpec,
    *,
    loss: str,
    steps: int,
    examples: int,
    lr: float,
    eps: float,
    radius: float,
    projection: str,
    bound_x: float,
    bound_y: float,
    bound_v: float,
    grad_lipschitz: float,
    grad_eps: float,
    corrected_bounds: bool,
) -> dict[str, Any]:
    """Everything ``icdl theory`` reports, as one JSON-ready dict (keys documented in docs/theory.md)."""
    from icdl import theory as th

    kwargs, sums = _fitted_counts(spec, loss, eps, radius)
    terms = th.term_counts(spec, loss, **kwargs)
    block = th.block_table(spec, terms, projection)  # type: ignore[arg-type]
    readout = th.readout_table(spec, terms)
    N, K = spec.depth, spec.width

    # Sum-of-ReLU errors: the measured sup error of each fitted sum; exact sums (relu, identity, squared
    # loss) contribute 0 (relu' is exact outside its delta-window, docs/paper.md, sublayers).
    eps_r = sums["r"]["sup_error"] if "r" in sums else 0.0
    eps_rp = sums["r_prime"]["sup_error"] if "r_prime" in sums else 0.0
    eps_l = sums["u"]["sup_error"] if "u" in sums else 0.0

    acts = [spec.layer_act(j) for j in range(1, N + 1)]
    L_r = max(a.lipschitz for a in acts)
    L_rp = max(a.deriv_lipschitz for a in acts)
    L_l = get_loss(loss).deriv_lipschitz
    ab = th.activation_bounds(spec, bound_x=bound_x, bound_v=bound_v, corrected=corrected_bounds)
    E_r = th.lemma2_E_r(spec, lipschitz_r=L_r, bound_v=bound_v)
    B_l = th.loss_derivative_bound(loss, bound_t=ab.B_r[-1], bound_y=bound_y)
    l6 = th.lemma6_constants(
        spec,
        E_r=E_r,
        B_r_prime=ab.max_r_prime,
        B_l=B_l,
        bound_v=bound_v,
        lipschitz_r_prime=L_rp,
        lipschitz_l=L_l,
    )
    t1 = th.theorem1_constants(spec, l6, B_r=ab.max_r, E_r=E_r)
    flops = th.model_flops(spec, terms, examples=examples, steps=steps, projection=projection)  # type: ignore[arg-type]
    direct = th.direct_gd_flops(spec, examples=examples, steps=steps)
    ranges = {
        "R_1": max(bound_v * ab.max_r, 1.0),
        "R_2": max(bound_v * ab.max_r_prime, 1.0),
        "R_3": max(bound_v * ab.max_r, bound_y, 1.0),
    }
    return {
        "network": {
            "depth": N,
            "width": K,
            "in_dim": spec.in_dim,
            "out_dim": spec.out_dim,
            "activation": spec.activation,
            "output": spec.output,
            "loss": loss,
        },
        "steps": steps,
        "examples": examples,
        "tokens": examples + 1,
        "lr": lr,
        "eps": eps,
        "range": radius,
        "projection": projection,
        "num_params": spec.num_params,
        "num_units": spec.num_units,
        "sublayers": th.sublayers(N, steps),
        "sublayers_per_step": th.sublayers_per_step(N),
        "readout_sublayers": th.readout_sublayers(N),
        "total_sublayers": th.sublayers(N, steps) + th.readout_sublayers(N),
        "embedding_dim": th.embedding_dim(spec),
        "embedding_dim_closed_form": (
            th.embedding_dim_closed_form(N, K, spec.in_dim) if spec.in_dim == spec.out_dim else None
        ),
        "embedding_dim_as_printed": th.embedding_dim_as_printed(spec),
        "embedding_dim_paper_bound": th.embedding_dim_paper_bound(spec),
        "embedding_dim_leading_terms": th.embedding_dim_leading_terms(spec),
        "max_heads": th.max_heads(spec, terms),
        "max_mlp_hidden": max(s.hidden for s in block + readout),
        "terms": {"r": list(terms.r), "r_prime": list(terms.r_prime), "u": list(terms.u)},
        "relu_sums": sums,
        "per_sublayer": [{"index": i + 1, **s.to_dict()} for i, s in enumerate(block)],
        "readout": [{"index": i + 1, **s.to_dict()} for i, s in enumerate(readout)],
        "bounds": {
            "assumptions": {
                "B_x": bound_x,
                "B_y": bound_y,
                "B_v": bound_v,
                "L_r": L_r,
                "L_r_prime": L_rp,
                "L_l": L_l,
                "corrected": corrected_bounds,
            },
            "B_r_layers": list(ab.B_r),
            "B_r_prime_layers": list(ab.B_r_prime),
            "B_r": ab.max_r,
            "B_r_prime": ab.max_r_prime,
            "B_l": B_l,
            "required_ranges": ranges,
            "range_sufficient": all(radius >= v for v in ranges.values()),
            "sum_errors": {"eps_r": eps_r, "eps_r_prime": eps_rp, "eps_l": eps_l},
            "lemma2_layer_factors": list(th.lemma2_layer_factors(spec, lipschitz_r=L_r, bound_v=bound_v)),
            "E_r": E_r,
            "lemma2_error": E_r * eps_r,
            "lemma3_error": th.lemma3_error(
                eps_r_prime=eps_rp, eps_r=eps_r, lipschitz_r_prime=L_rp, bound_v=bound_v, E_r=E_r
            ),
            "lemma4_error": th.lemma4_error(eps_l=eps_l, eps_r=eps_r, lipschitz_l=L_l, E_r=E_r),
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
            "corollary11": {
                "L_f": grad_lipschitz,
                "eps": grad_eps,
                "corrected": th.corollary11_bound(
                    eps=grad_eps, lr=lr, lipschitz_f=grad_lipschitz, steps=steps
                ),
                "loose": th.corollary11_loose(eps=grad_eps, lr=lr, lipschitz_f=grad_lipschitz, steps=steps),
                "as_printed": th.corollary11_as_printed(
                    eps=grad_eps, examples=examples, lipschitz_f=grad_lipschitz, steps=steps
                ),
            },
        },
        "flops": {
            "compiled_forward": flops["total"],
            "compiled_per_block": flops["per_block"],
            "compiled_readout": flops["readout"],
            "direct_gd": direct,
            "ratio_compiled_to_direct": flops["total"] / direct if direct else None,
            "paper_construction": th.paper_construction_flops(
                examples=examples, steps=steps, depth=N, width=K, eps=eps
            ),
            "paper_direct": th.paper_direct_flops(examples=examples, steps=steps, depth=N, width=K),
        },
    }


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "inf" if x > 0 else str(x)
        return f"{x:.4g}"
    return str(x)


def _render(r: dict[str, Any]) -> str:
    net = r["network"]
    b = r["bounds"]
    lines = [
        f"network  N={net['depth']} K={net['width']} d_x={net['in_dim']} d_y={net['out_dim']} "
        f"activation={net['activation']} output={net['output']} loss={net['loss']}",
        f"prompt   n={r['examples']} examples, T={r['tokens']} tokens; L={r['steps']} GD steps, "
        f"eta={r['lr']}, projection={r['projection']}",
        "",
        f"parameters P = D_w          {r['num_params']}",
        f"units sum_j n_j             {r['num_units']}",
        f"sublayers (2N+4)L           {r['sublayers']}  ({r['sublayers_per_step']} per step)"
        f" + readout {r['readout_sublayers']} = {r['total_sublayers']}",
        f"embedding dim D             {r['embedding_dim']}"
        f"  (paper O(NK^2)+D_w ~ {r['embedding_dim_paper_bound']}, leading NK^2+3NK = "
        f"{r['embedding_dim_leading_terms']}, as printed {r['embedding_dim_as_printed']})",
        f"max heads / max MLP hidden  {r['max_heads']} / {r['max_mlp_hidden']}",
        f"ReLU-sum terms              r {r['terms']['r']}  r' {r['terms']['r_prime']}  u {r['terms']['u']}",
        "",
        f"{'#':>3}  {'role':<10} {'kind':<15} {'paper':<24} {'layer':>5} {'heads':>6} {'hidden':>7}",
    ]
    for group in (r["per_sublayer"], r["readout"]):
        for s in group:
            layer = "" if s["layer"] is None else s["layer"]
            lines.append(
                f"{s['index']:>3}  {s['role']:<10} {s['kind']:<15} {s['lemma']:<24} {layer!s:>5} "
                f"{s['heads'] or '':>6} {s['hidden'] or '':>7}"
            )
        if group is r["per_sublayer"]:
            lines.append("     -- readout (after the last block, not in the paper) --")
    t1, c11, l6 = b["theorem1"], b["corollary11"], b["lemma6"]
    f = r["flops"]
    lines += [
        "",
        f"bounds   B_r={_fmt(b['B_r'])} B_r'={_fmt(b['B_r_prime'])} B_l={_fmt(b['B_l'])} "
        f"E_r={_fmt(b['E_r'])}  ranges R_1..3 = "
        + ", ".join(_fmt(v) for v in b["required_ranges"].values())
        + f" (range {r['range']} {'ok' if b['range_sufficient'] else 'TOO SMALL'})",
        f"sum errors eps_r={_fmt(b['sum_errors']['eps_r'])} eps_r'={_fmt(b['sum_errors']['eps_r_prime'])} "
        f"eps_l={_fmt(b['sum_errors']['eps_l'])}  -> Lemma 2/3/4 errors {_fmt(b['lemma2_error'])} / "
        f"{_fmt(b['lemma3_error'])} / {_fmt(b['lemma4_error'])}",
        f"Lemma 6  P={_fmt(l6['P'])} B_s={_fmt(l6['B_s'])} E_s^r={_fmt(l6['E_s_r'])} "
        f"E_s^r'={_fmt(l6['E_s_r_prime'])} E_s^l={_fmt(l6['E_s_l'])}",
        f"Thm 1    C_l={_fmt(t1['C_l'])} C_r={_fmt(t1['C_r'])} C_r'={_fmt(t1['C_r_prime'])}; "
        f"for grad eps {_fmt(t1['grad_eps'])}: eps_l={_fmt(t1['split']['eps_l'])} "
        f"eps_r={_fmt(t1['split']['eps_r'])} eps_r'={_fmt(t1['split']['eps_r_prime'])}; "
        f"bound at these sums {_fmt(t1['grad_error_bound'])}",
        f"Cor 1.1  ||w_bar^L - w_GD^L|| <= {_fmt(c11['corrected'])} (corrected), {_fmt(c11['loose'])} "
        f"(loose), {_fmt(c11['as_printed'])} (as printed, (1+nL_f)^L) with L_f={_fmt(c11['L_f'])}",
        f"FLOPs    compiled forward {_fmt(float(f['compiled_forward']))} vs direct GD 6PnL "
        f"{_fmt(float(f['direct_gd']))}; paper O(nLN^3K^5/eps^2) ~ {_fmt(f['paper_construction'])} vs "
        f"O(nLNK^2) ~ {_fmt(f['paper_direct'])}",
    ]
    if not math.isfinite(b["assumptions"]["L_r_prime"]):
        lines.append(
            "note     r' is discontinuous (L_r' = inf): Theorem 1's bounds do not cover this activation "
            "(docs/paper.md, erratum E1); the construction is exact outside relu's delta-window instead."
        )
    return "\n".join(lines)


@click.command(name="theory")
@click.option("--depth", type=click.IntRange(min=2), required=True, help="Network depth N (>= 2).")
@click.option("--width", type=click.IntRange(min=1), required=True, help="Hidden width K (>= 1).")
@click.option("--in-dim", type=click.IntRange(min=1), required=True, help="Input dimension d_x.")
@click.option("--out-dim", type=click.IntRange(min=1), required=True, help="Output dimension d_y.")
@click.option("--steps", type=click.IntRange(min=1), required=True, help="GD steps L.")
@click.option("--activation", default="relu", show_default=True, help=f"One of {', '.join(ACTIVATIONS)}.")
@click.option(
    "--output",
    type=click.Choice(["same", "linear"]),
    default="same",
    show_default=True,
    help="'same' applies r at the output layer (the paper); 'linear' does not.",
)
@click.option("--loss", default="squared", show_default=True, help=f"One of {', '.join(LOSSES)}.")
@click.option("--eps", type=POSITIVE_FLOAT, default=1e-3, show_default=True, help="Target ReLU-sum error.")
@click.option(
    "--range", "radius", type=POSITIVE_FLOAT, default=10.0, show_default=True, help="ReLU-sum range R."
)
@click.option(
    "--projection", type=click.Choice(["none", "box"]), default="none", show_default=True, help="Proj_W."
)
@click.option("--examples", type=click.IntRange(min=1), default=10, show_default=True, help="Examples n.")
@click.option("--lr", type=POSITIVE_FLOAT, default=0.1, show_default=True, help="Step size eta.")
@click.option("--bound-x", type=POSITIVE_FLOAT, default=1.0, show_default=True, help="B_x >= ||x||_2.")
@click.option("--bound-y", type=POSITIVE_FLOAT, default=1.0, show_default=True, help="B_y >= ||y||_2.")
@click.option("--bound-v", type=POSITIVE_FLOAT, default=1.0, show_default=True, help="B_v >= ||v_jk||_2.")
@click.option(
    "--grad-lipschitz",
    type=POSITIVE_FLOAT,
    default=1.0,
    show_default=True,
    help="L_f of grad L_n (Cor. 1.1).",
)
@click.option(
    "--grad-eps",
    type=POSITIVE_FLOAT,
    default=None,
    help="Per-step gradient error eps of Thm 1 [default: --eps].",
)
@click.option(
    "--corrected-bounds",
    is_flag=True,
    help="Use l2-correct pre-activation ranges (docs/paper.md, erratum E13).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def theory(
    depth: int,
    width: int,
    in_dim: int,
    out_dim: int,
    steps: int,
    activation: str,
    output: str,
    loss: str,
    eps: float,
    radius: float,
    projection: str,
    examples: int,
    lr: float,
    bound_x: float,
    bound_y: float,
    bound_v: float,
    grad_lipschitz: float,
    grad_eps: float | None,
    corrected_bounds: bool,
    as_json: bool,
) -> None:
    """Print the paper's sizes, head counts, error bounds and FLOPs for an N-layer network."""
    get_activation(activation)
    get_loss(loss)
    spec = NetSpec(depth, width, in_dim, out_dim, activation=activation, output=output)  # type: ignore[arg-type]
    result = compute(
        spec,
        loss=loss,
        steps=steps,
        examples=examples,
        lr=lr,
        eps=eps,
        radius=radius,
        projection=projection,
        bound_x=bound_x,
        bound_y=bound_y,
        bound_v=bound_v,
        grad_lipschitz=grad_lipschitz,
        grad_eps=eps if grad_eps is None else grad_eps,
        corrected_bounds=corrected_bounds,
    )
    if as_json:
        emit_json(result)
    else:
        click.echo(_render(result))
