"""``icdl theory``: the paper's sizes, head counts, error bounds and FLOPs for one network spec.

For example:

```bash
icdl theory --depth 3 --width 5 --in-dim 4 --out-dim 2 --steps 3
icdl theory --depth 4 --width 20 --in-dim 20 --out-dim 1 --steps 10 --activation sigmoid --json
```

All numbers come from [`icdl.theory`][icdl.theory]; term counts of smooth activations come from fitted sums
([`icdl.relu_sums.relu_sum_for`][icdl.relu_sums.relu_sum_for] with ``--eps`` and ``--range``). docs/theory.md
explains every field.
"""

from __future__ import annotations

import math
from typing import Any

import click

from icdl.budget import QUICK_SECONDS
from icdl.cli import paused_gc
from icdl.cli._common import (
    POSITIVE_FLOAT,
    count,
    emit_json,
    examples,
    guard,
    network_options,
    relu_sum_options,
    yes_option,
)


def _float(x: float) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.inf


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
        f"FLOPs    compiled forward {_fmt(_float(f['compiled_forward']))} vs direct GD 6PnL "
        f"{_fmt(_float(f['direct_gd']))}; paper O(nLN^3K^5/eps^2) ~ {_fmt(f['paper_construction'])} vs "
        f"O(nLNK^2) ~ {_fmt(f['paper_direct'])}",
    ]
    if not math.isfinite(b["assumptions"]["L_r_prime"]):
        lines.append(
            "note     r' is discontinuous (L_r' = inf): Theorem 1's bounds do not cover this activation "
            "(docs/paper.md, erratum E1); the construction is exact outside relu's delta-window instead."
        )
    return "\n".join(lines)


@click.command(
    name="theory",
    epilog=examples("icdl theory -N 3 -K 8 -L 10", "icdl theory --activation sigmoid -L 10 --json"),
)
@network_options
@click.option("--steps", "-L", type=count(1), required=True, help="GD steps L.")
@relu_sum_options
@click.option(
    "--projection", type=click.Choice(["none", "box"]), default="none", show_default=True, help="Proj_W."
)
@click.option(
    "--examples",
    "-n",
    type=count(1),
    default=32,
    show_default=True,
    help="In-context examples n (the default of icdl construct).",
)
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
    show_default="--eps",
    help="Per-step gradient error eps of Thm 1.",
)
@click.option(
    "--corrected-bounds",
    is_flag=True,
    help="Use l2-correct pre-activation ranges (docs/paper.md, erratum E13).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@yes_option
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
    yes: bool,
) -> None:
    """Print the paper's sizes, head counts, error bounds and FLOPs for an N-layer network."""
    # Imported here, not at the top: both import torch, which --help must not wait for.
    with paused_gc():  # torch's import: its objects are frozen in the console script (icdl.cli)
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.nets import NetSpec, get_activation, get_loss
        from icdl.theory_report import compute, compute_estimate

    get_activation(activation)
    get_loss(loss)
    spec = NetSpec(depth, width, in_dim, out_dim, activation=activation, output=output)  # type: ignore[arg-type]
    guard(compute_estimate(spec, loss=loss, eps=eps, radius=radius), yes, max_seconds=QUICK_SECONDS)
    result = compute(
        spec,
        loss=loss,
        steps=steps,
        examples=examples,
        lr=lr,
        eps=eps,
        radius=radius,
        projection=projection,  # type: ignore[arg-type]
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
