"""``icdl align RUN_DIR`` — which algorithm does the trained transformer run?

Per k, the agreement of the run's ICL predictions with each baseline, with L-step GD on the target
architecture over a grid of (lr, L, init), and with a compiled GD transformer: R² between predictors and the
cosine of their sensitivities d ŷ / d y_i and d ŷ / d x_query
([`icdl.icl.analysis.align`][icdl.icl.analysis.align]). Writes ``RUN_DIR/align/align.json`` and its plots (and
a copy to ``--out DIR``), prints a table. Exit codes: 0 ok, 2 bad input (bad or unfinished run directory,
score run, unknown baseline, bad k; one line on stderr).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from icdl.cli import paused_gc
from icdl.cli._common import (
    VariantChoice,
    check_output,
    count,
    emit_json,
    examples,
    guard,
    threads_option,
    yes_option,
)
from icdl.icl.suites import EVAL_SEED

# AlignOptions' defaults (icdl.icl.analysis.align), written out here so that --help does not import torch;
# tests/cli/test_cli_one_tool.py checks each against AlignOptions, which validates the values again.
DEFAULT_BASELINES = ("averaging", "ridge", "ridge_tuned", "kernel", "radial", "blup")
GD_LRS = (0.03, 0.1, 0.3, 1.0, 3.0)
GD_STEPS = (1, 3, 10, 30)
GD_INITS = (0.1, 1.0)


def _ints(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    if value.strip() in ("", "none"):
        return ()
    try:
        return tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers") from None


def _floats(value: str | None, default: tuple[float, ...]) -> tuple[float, ...]:
    if value is None:
        return default
    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of numbers") from None


def _fmt(v: Any) -> str:
    return f"{v:7.3f}" if isinstance(v, (int, float)) and math.isfinite(v) else "      –"


def summary_lines(res: dict[str, Any], rows: int = 6) -> list[str]:
    """The table printed by ``icdl align``: per predictor the range means of R² (vs ICL), the correlation,
    cos_y, cos_x and R² vs the labels; the GD grid shows only its best points; then the compiled model's
    check."""
    per = res["predictors"]
    ranges = [f"{a}-{b}" for a, b in res["ranges"]]

    def score(n: str) -> float:
        v = per[n]["ranges"][ranges[0]]["r2"]
        return -v if isinstance(v, (int, float)) and math.isfinite(v) else math.inf

    gd = sorted((n for n, e in per.items() if e["kind"] == "gd"), key=score)
    shown = [n for n, e in per.items() if e["kind"] != "gd"] + gd[:rows]
    head = "".join(f"{'R²~ICL ' + r:>14}{'corr':>8}{'cos_y':>8}{'cos_x':>8}{'R²~y':>8}" for r in ranges)
    lines = [f"{'predictor (mean over ks in range)':<34}{head}"]
    for n in shown:
        cells = "".join(
            f"{_fmt(per[n]['ranges'][r]['r2']):>14}{_fmt(per[n]['ranges'][r].get('corr')):>8}"
            f"{_fmt(per[n]['ranges'][r]['cos_y']):>8}"
            f"{_fmt(per[n]['ranges'][r]['cos_x']):>8}{_fmt(per[n]['ranges'][r]['r2_truth']):>8}"
            for r in ranges
        )
        lines.append(f"{n:<34}{cells}")
    if len(gd) > rows:
        lines.append(f"  ({len(gd) - rows} more GD grid points in the JSON)")
    closest = res.get("closest") or {}
    if closest:
        lines.append("closest to ICL per k band (correlation of the predictions; conclude per band only):")
        for band, row in closest.items():
            if row.get("closest") is None:
                lines.append(f"  k {band:<7} –")
                continue
            tail = (
                f", then {row['runner_up']} {_fmt(row['runner_up_value']).strip()}"
                f" (margin {row['margin']:.3f})"
                if "runner_up" in row
                else ""
            )
            lines.append(f"  k {band:<7} {row['closest']} {_fmt(row['value']).strip()}{tail}")
    comp = res.get("compiled")
    if comp:
        lines.append(f"compiled {comp['variant']} model of {comp['point']}:")
        for row in comp["ks"]:
            g, i = row["vs_gd"], row["vs_icl"]
            lines.append(
                f"  k={row['k']:<3} vs its GD point: R² {_fmt(g['r2'])} cos_y {_fmt(g['cos_y'])} cos_x "
                f"{_fmt(g['cos_x'])} (max |Δŷ| {row['max_abs_pred_diff']:.1e});  vs ICL: R² {_fmt(i['r2'])} "
                f"cos_y {_fmt(i['cos_y'])} cos_x {_fmt(i['cos_x'])}"
            )
    return lines


@click.command(
    name="align",
    epilog=examples("icdl align runs/tiny", "icdl align runs/tiny --variant paper --out align-tiny"),
)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--prompts", type=count(2), default=128, show_default=True, help="Test prompts.")
@click.option(
    "--ks",
    default=None,
    metavar="LIST",
    show_default="1,2,3,5,10,...,E,K",
    help="k values (E: training length).",
)
@click.option(
    "--baselines",
    default=",".join(DEFAULT_BASELINES),
    show_default=True,
    metavar="LIST",
    help=(
        "Comma-separated baselines: zero, averaging, least-squares, ridge, knn, ridge_tuned, kernel, "
        "radial, blup, mlp_tuned (minutes: tuned on held-out prompts, differentiated through its "
        "training); none."
    ),
)
@click.option(
    "--gd-lrs", default=None, metavar="LIST", show_default=",".join(map(str, GD_LRS)), help="GD step sizes."
)
@click.option(
    "--gd-steps",
    default=None,
    metavar="LIST",
    show_default=",".join(map(str, GD_STEPS)),
    help="GD step counts L.",
)
@click.option(
    "--gd-inits",
    default=None,
    metavar="LIST",
    show_default=",".join(map(str, GD_INITS)),
    help="GD initial scales (times He).",
)
@click.option(
    "--compiled-ks",
    default=None,
    metavar="LIST",
    show_default="5,10,E",
    help="k values of the compiled model; none skips it.",
)
@click.option(
    "--compiled-prompts",
    type=count(1),
    default=16,
    show_default=True,
    help="Prompts the compiled model runs on (the first ones).",
)
@click.option(
    "--compiled-max-steps",
    type=count(1),
    default=10,
    show_default=True,
    help="Compile the best GD point with at most this many steps.",
)
@click.option(
    "--variant",
    type=VariantChoice(),
    default="compact",
    show_default=True,
    help="Construction variant of the compiled model (as in icdl construct).",
)
@click.option(
    "--seed", type=count(0), default=EVAL_SEED, show_default=True, help="Test seed (the evaluation seed)."
)
@click.option("--partial", is_flag=True, help="Align an unfinished run's newest checkpoint.")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Also copy JSON and plots to DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar or table.")
@threads_option("large")
@yes_option
def align(
    run_dir: Path, prompts: int, ks: str | None, baselines: str, gd_lrs: str | None, gd_steps: str | None,
    gd_inits: str | None, compiled_ks: str | None, compiled_prompts: int, compiled_max_steps: int,
    variant: str, seed: int, partial: bool, out: Path | None, as_json: bool, quiet: bool,
    yes: bool = False,
) -> None:  # fmt: skip
    """Agreement of a run's ICL predictions with baselines, GD on the target and a compiled model."""
    with paused_gc():  # torch's import: its objects are frozen in the console script (icdl.cli)
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.icl.analysis.align import AlignOptions, align_estimate, align_run, result_path
        from icdl.icl.analysis.align_plots import plot_alignment
        from icdl.icl.evaluation.evaluate import checkpoint_info
        from icdl.icl.training.train import read_run_config
    from icdl.io import atomic_write

    checkpoint_info(run_dir)  # missing run, no checkpoint, score run: one line, exit 2
    check_output(run_dir / "align", "the alignment folder", directory=True)
    check_output(out, "--out", directory=True)
    names = tuple(b.strip() for b in baselines.split(",") if b.strip() and b.strip() != "none")
    steps = _ints(gd_steps)
    opts = AlignOptions(
        prompts=prompts,
        ks=_ints(ks),
        baselines=names,
        gd_lrs=_floats(gd_lrs, GD_LRS),
        gd_steps=GD_STEPS if steps is None else steps,
        gd_inits=_floats(gd_inits, GD_INITS),
        compiled_ks=_ints(compiled_ks),
        compiled_prompts=compiled_prompts,
        compiled_max_steps=compiled_max_steps,
        compiled_variant=variant,
    )
    cfg = read_run_config(run_dir)
    guard(align_estimate(cfg, opts), yes)
    res = align_run(
        run_dir, opts, seed=seed, allow_partial=partial,
        progress=False if quiet else None,
    )  # fmt: skip
    path = result_path(run_dir)
    plots = plot_alignment(res, path.parent)
    if out is not None:
        for f in (path, *plots):
            data = f.read_bytes()

            def write(fh: Any, data: bytes = data) -> None:
                fh.write(data)

            atomic_write(out / f.name, write, binary=True)
    if as_json:
        emit_json(res)
    elif not quiet:
        click.echo(f"{path} (computed in {res['seconds']:.1f} s)")
        for line in summary_lines(res):
            click.echo(line)
