"""``icdl demo``: the main job on a small default, end to end, in about 80 s on 2 CPU cores.

It chains the other subcommands (so the demo exercises exactly what a user would run):

1. ``icdl approx sigmoid`` — a sum-of-ReLU approximation (Definition 4) of the sigmoid.
2. ``icdl construct`` — the (2N+4)L-sublayer transformer of Theorem 1 for a 3-layer ReLU network,
   verified against reference GD (exact to float64 round-off), then the same for a sigmoid network
   (within a measured error, next to the corrected Corollary 1.1 bound).
3. ``icdl train`` — a short pretraining run of an ICL transformer on random deep-network tasks.
4. ``icdl evaluate`` and ``icdl report`` — R² per number of in-context examples against baselines,
   plots and a markdown report in the run directory.
"""

from __future__ import annotations

from pathlib import Path

import click

from icdl.cli._common import check_output, count, guard, yes_option


def _banner(title: str) -> None:
    click.echo("")
    click.secho(f"== {title} ", bold=True, nl=False)
    click.echo("=" * max(0, 74 - len(title)))


@click.command(name="demo")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs/demo"),
    show_default=True,
    help="Directory for the demo's pretraining run, evaluation and report.",
)
@click.option("--skip-train", is_flag=True, help="Only the construction part (seconds).")
@click.option("--steps", type=count(1), default=None, help="Override the pretraining steps.")
@yes_option
@click.pass_context
def demo(ctx: click.Context, out: Path, skip_train: bool, steps: int | None, yes: bool = False) -> None:
    """Run the main job on a small default, end to end (about 80 s on 2 CPU cores)."""
    from icdl.cli.approx import approx
    from icdl.cli.construct import construct

    if not skip_train:  # the pretraining part is the only sizeable one: check it before anything runs
        from icdl.config import load_config
        from icdl.icl.train import train_estimate

        check_output(out, "--out", directory=True)
        overrides = [] if steps is None else [f"train.steps={steps}"]
        guard(train_estimate(load_config("demo", overrides)), yes)

    _banner("1. A sum of ReLUs for the sigmoid on [-10, 10] (Definition 4)")
    ctx.invoke(approx, function="sigmoid", eps=1e-3, radius=10.0)

    _banner("2a. Compile: 3-layer ReLU network, 5 GD steps, verified against reference GD")
    ctx.invoke(construct, depth=3, width=8, in_dim=4, out_dim=2, steps=5, examples=32, lr=0.1, seed=0)

    _banner("2b. Compile: 3-layer sigmoid network, ReLU sums at eps = 1e-4 (approximate, measured)")
    ctx.invoke(
        construct, depth=3, width=8, in_dim=4, out_dim=1, activation="sigmoid", steps=5, examples=32,
        lr=0.5, eps=1e-4, seed=0,
    )  # fmt: skip

    if skip_train:
        return
    _run_icl_part(ctx, out, steps, yes)


def _run_icl_part(ctx: click.Context, out: Path, steps: int | None, yes: bool) -> None:
    from icdl.cli.evaluate import evaluate
    from icdl.cli.report import report
    from icdl.cli.train import train

    run_dir = out / "run"
    overrides = [] if steps is None else [f"train.steps={steps}"]
    _banner(f"3. Pretrain an ICL transformer (preset demo, resumable) -> {run_dir}")
    ctx.invoke(train, config="demo", overrides=tuple(overrides), out=run_dir, yes=yes)

    _banner("4. Evaluate: R² per number of in-context examples against baselines")
    ctx.invoke(
        evaluate, run_dir=run_dir, suite="in-distribution", prompts=256, resamples=200,
        mlp_prompts=32, mlp_width=64, mlp_epochs=50, gd_steps=5, gd_prompts=64,
    )  # fmt: skip

    _banner("5. Report: plots and markdown")
    ctx.invoke(report, run_dirs=(run_dir,), out=out / "report", suites="in-distribution", evaluate="none")
