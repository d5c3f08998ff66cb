"""``icdl approx FUNCTION`` — fit a sum-of-ReLU approximation and report it (paper Definition 4).

For example:

```bash
icdl approx sigmoid --eps 1e-3 --range 10
icdl approx "tanh'" --eps 1e-6 --json
icdl approx softplus --plot out/softplus.png
```
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from icdl.budget import QUICK_SECONDS
from icdl.cli import paused_gc
from icdl.cli._common import (
    POSITIVE_FLOAT,
    check_output,
    emit_json,
    examples,
    guard,
    threads_option,
    user_error,
    yes_option,
)
from icdl.io import atomic_write

if TYPE_CHECKING:  # imported when the command runs: --help does not wait for torch
    from icdl.relu_sums import ReluSum

FIGURE_FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg"}


def _write_plot(s: ReluSum, path: Path, delta: float, dpi: int = 120) -> None:
    """Function, sum (with the flat extension beyond ±R) and error, written atomically as PNG, PDF or SVG
    (by the suffix of ``path``)."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    import torch
    from matplotlib.figure import Figure  # not pyplot: no backend is chosen or switched

    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.relu_sums import target_function

    fmt = FIGURE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise user_error(f"cannot write plot {str(path)!r}: the name must end in .png, .pdf or .svg")
    fn = target_function(s.target)
    r = s.radius
    wide = torch.linspace(-1.2 * r, 1.2 * r, 4001, dtype=torch.float64)
    inner = torch.linspace(-r, r, 20001, dtype=torch.float64)
    if s.target == "relu'":
        inner = inner[(inner <= 0) | (inner >= delta)]
    fig = Figure(figsize=(7, 6))
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    ax1.plot(wide, fn(wide), label=s.target, lw=2, alpha=0.5)
    ax1.plot(wide, s(wide), label=f"ReLU sum, H={s.num_terms}", lw=1)
    ax1.axvspan(-r, r, color="0.9", zorder=-1)
    ax1.legend(loc="best")
    ax1.set_title(f"{s.target} on [-{r:g}, {r:g}]: sup error {s.sup_error:.3g} (eps {s.eps:g})")
    ax2.plot(inner, fn(inner) - s(inner), lw=0.8)
    if s.eps > 0:
        for sign in (1, -1):
            ax2.axhline(sign * s.eps, color="r", ls="--", lw=0.8)
    ax2.set_ylabel("function - sum")
    ax2.set_xlabel("t")
    fig.tight_layout()
    try:
        atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, dpi=dpi), binary=True)
    except OSError as exc:
        raise user_error(f"cannot write plot {str(path)!r}: {exc.strerror or exc}") from None


@click.command(
    name="approx",
    epilog=examples(
        "icdl approx sigmoid --eps 1e-3 --range 10", 'icdl approx "tanh\'" --plot tanh-deriv.png'
    ),
)
@click.argument("function")
@click.option("--eps", type=POSITIVE_FLOAT, default=1e-3, show_default=True, help="Target sup error.")
@click.option(
    "--range", "radius", type=POSITIVE_FLOAT, default=10.0, show_default=True, help="Fit on [-R, R]."
)
@click.option(
    "--delta", type=POSITIVE_FLOAT, default=1e-9, show_default=True, help="Width of the relu' step."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (with all terms).")
@click.option(
    "--plot",
    "plot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a plot here (.png, .pdf or .svg).",
)
@click.option(
    "--dpi", type=click.IntRange(10, 2400), default=120, show_default=True, help="Resolution of --plot."
)
@threads_option("small")
@yes_option
def approx(
    function: str,
    eps: float,
    radius: float,
    delta: float,
    as_json: bool,
    plot: Path | None,
    dpi: int,
    yes: bool,
) -> None:
    """Fit sum_m c_m relu(a_m t + b_m) to FUNCTION on [-R, R] with measured sup error <= eps.

    FUNCTION is an activation (relu, sigmoid, tanh, softplus, identity) or its derivative with a
    trailing prime (sigmoid') or -deriv suffix. The sum is constant outside [-R, R].
    """
    check_output(plot, "--plot")
    if plot is not None and plot.suffix.lower() not in FIGURE_FORMATS:
        raise user_error(f"cannot write plot {str(plot)!r}: the name must end in .png, .pdf or .svg")
    with paused_gc():  # torch's import: its objects are frozen in the console script (icdl.cli)
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.relu_sums import fit_estimate, relu_sum_for

    guard(fit_estimate(function, eps=eps, radius=radius), yes, max_seconds=QUICK_SECONDS)
    s = relu_sum_for(function, eps=eps, radius=radius, delta=delta)
    if plot is not None:
        _write_plot(s, plot, delta, dpi)
    if as_json:
        emit_json(s.to_dict())
        return
    kind = "exact" if s.exact else f"fitted to eps={s.eps:g}"
    click.echo(f"{s.target} on [-{s.radius:g}, {s.radius:g}] ({kind})")
    click.echo(f"  terms H        {s.num_terms}")
    click.echo(f"  coef mass C    {s.coef_mass:.6g}")
    click.echo(f"  max |a|        {s.max_abs_a:.6g}")
    click.echo(f"  sup error      {s.sup_error:.3g} (measured on a dense grid)")
    if plot is not None:
        click.echo(f"  plot           {plot}")
