"""``icdl evaluate RUN_DIR --suite NAME`` — R² curves of a run's newest checkpoint and the baselines.

Writes ``RUN_DIR/eval/<suite>.json`` atomically and reuses it when the request and the checkpoint are
unchanged (``--force`` recomputes). Suites: in-distribution, mixture, mixture-prompt, weight-shift,
weight-shift-std, long-prompts, centred, depth (``--suite all`` runs every suite but depth). Exit codes:
0 ok, 2 bad input (bad run directory, unknown suite or baseline; one line on stderr).
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from icdl.cli import paused_gc
from icdl.cli._common import (
    POSITIVE_FLOAT,
    check_output,
    count,
    emit_json,
    examples,
    guard,
    threads_option,
    yes_option,
)
from icdl.icl.suites import DEFAULT_PROMPTS, EVAL_SEED, suite_names


def _ks(value: str | None, option: str = "--mlp-ks") -> tuple[int, ...] | None:
    """A comma-separated list of integers >= 1 (``--mlp-ks``, ``--loops``), or None."""
    if value is None:
        return None
    try:
        ks = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        bad = f"{value!r} is not a comma-separated list of integers"
        raise click.BadParameter(bad, param_hint=option) from None
    if not ks or min(ks) < 1:
        raise click.BadParameter("values must be integers >= 1", param_hint=option)
    return ks


def _summary_lines(res: dict) -> list[str]:
    lines = []
    for cname, c in res["conditions"].items():
        ranges = [tuple(r) for r in c["ranges"]]
        flag = (
            "  [DEGENERATE: " + "; ".join(c["diagnostics"]["reasons"]) + "]"
            if c["diagnostics"]["degenerate"]
            else ""
        )
        lines.append(f"{res['suite']['name']}/{cname}: {c['label']}{flag}")
        head = "  mean R² over k = " + ", ".join(f"{a}-{b}" for a, b in ranges)
        lines.append(head)
        for pname, curve in c["predictors"].items():
            vals = []
            for a, b in ranges:
                part = [v for v in curve["r2"][a : b + 1] if v is not None and math.isfinite(v)]
                vals.append(f"{sum(part) / len(part):8.3f}" if part else "       –")
            verdicts = ""
            comp = c["comparisons"].get(pname)
            if comp:
                verdicts = "   ICL " + ", ".join(f"{v['verdict']} ({k})" for k, v in comp["ranges"].items())
            lines.append(f"    {pname:<22}{''.join(vals)}{verdicts}")
    if any(c["comparisons"] for c in res["conditions"].values()):
        level = res.get("options", {}).get("level", 0.9)
        lines.append(verdict_footnote(level))
    return lines


def verdict_footnote(level: float) -> str:
    """What ``ICL beats / matches / trails (a-b)`` next to a baseline means (the paired band of
    [`icdl.icl.evaluation.evaluate`][icdl.icl.evaluation.evaluate])."""
    return (
        f"  ICL beats / matches / trails (a-b): the {level:.0%} paired bootstrap band of the mean of "
        "R²(ICL) - R²(baseline) over k = a..b lies above 0 / contains 0 / lies below 0; 'matches' means no "
        "difference is resolved at these prompts, not equal R² (compare the two means)"
    )


# EvalOptions' defaults and lower bounds (icdl.icl.evaluation.evaluate), written out here so that --help does
# not import torch; tests/cli/test_cli_one_tool.py checks each against EvalOptions, which validates the values
# again.
POOLINGS = ("pooled", "batch_mean")


@click.command(
    name="evaluate", epilog=examples("icdl evaluate runs/tiny", "icdl evaluate runs/tiny --suite all --json")
)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--suite",
    "suite",
    default="in-distribution",
    show_default=True,
    help=f"Suite to evaluate: {', '.join(suite_names())}, or 'all'.",
)
@click.option(
    "--prompts",
    type=count(2),
    default=DEFAULT_PROMPTS,
    show_default=True,
    help="Test prompts per condition.",
)
@click.option(
    "--baselines",
    default=None,
    metavar="LIST",
    help="Comma-separated: zero, averaging, least-squares, ridge, knn, mlp, gd, ridge_tuned, kernel, "
    "mlp_tuned (minutes, in all but no suite's default), gd_target (slow, not in all); "
    "all; none.",
    show_default="the suite's",
)
@click.option("--seed", type=count(0), default=EVAL_SEED, show_default=True, help="Test seed.")
@click.option(
    "--pooling",
    type=click.Choice(POOLINGS),
    default="pooled",
    show_default=True,
    help="R² over all prompts at each k (pooled), or the mean of per-batch R² (batch_mean).",
)
@click.option("--resamples", type=count(10), default=1000, show_default=True, help="Bootstrap resamples.")
@click.option(
    "--mlp-prompts",
    type=count(2),
    default=64,
    show_default=True,
    help="Prompts the per-prompt MLP baseline is trained on (the first ones).",
)
@click.option(
    "--mlp-ks", default=None, metavar="LIST", show_default="1,5,10,E,K", help="k values for the MLP baseline."
)
@click.option("--mlp-width", type=count(1), default=200, show_default=True, help="MLP baseline width.")
@click.option("--mlp-epochs", type=count(1), default=100, show_default=True, help="MLP Adam epochs.")
@click.option("--mlp-lr", type=POSITIVE_FLOAT, default=5e-3, show_default=True, help="MLP Adam step size.")
@click.option(
    "--gd-steps",
    type=count(1),
    default=10,
    show_default=True,
    help="GD steps of the tuned-GD baseline on the target architecture.",
)
@click.option(
    "--gd-prompts",
    type=count(2),
    default=128,
    show_default=True,
    help="Prompts the tuned-GD baseline runs on (the first ones).",
)
@click.option(
    "--mlp-tuned-prompts",
    type=count(2),
    default=320,
    show_default=True,
    help="Test prompts the tuned MLP baseline (mlp_tuned) is fitted on (the first ones).",
)
@click.option(
    "--loops",
    default=None,
    metavar="LIST",
    help="A looped model (model.loops) at these test-time loop counts too, e.g. 1,2,4,8,16 "
    "(predictors icl_loops{L}).",
)
@click.option("--no-cost", is_flag=True, help="Skip the FLOPs / wall-time comparison.")
@click.option("--force", is_flag=True, help="Recompute even if a cached result exists (or is damaged).")
@click.option("--json", "as_json", is_flag=True, help="Print the results object as JSON on stdout.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar or summary.")
@threads_option("large")
@yes_option
def evaluate(
    run_dir: Path,
    suite: str,
    prompts: int,
    baselines: str | None,
    seed: int,
    pooling: str,
    resamples: int,
    mlp_prompts: int,
    mlp_ks: str | None,
    mlp_width: int,
    mlp_epochs: int,
    mlp_lr: float,
    gd_steps: int,
    gd_prompts: int,
    mlp_tuned_prompts: int,
    loops: str | None,
    no_cost: bool,
    force: bool,
    as_json: bool,
    quiet: bool,
    yes: bool = False,
) -> None:
    """Evaluate a run's newest checkpoint and the baselines on a suite (cached in RUN_DIR/eval/)."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.errors import InputError

    with paused_gc():  # torch's import: its objects are frozen in the console script (icdl.cli)
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.icl.evaluation.evaluate import (
            EvalOptions,
            checkpoint_info,
            evaluate_estimate,
            evaluate_run,
            parse_baselines,
            result_path,
        )
    from icdl.icl.suites import suite_names
    from icdl.icl.training.train import read_run_config

    checkpoint_info(run_dir)  # bad run directory: one line, exit 2
    check_output(run_dir / "eval", "the evaluation cache folder", directory=True)
    names = [s for s in suite_names() if s != "depth"] if suite == "all" else [suite]
    if suite != "all" and suite not in suite_names():
        raise InputError(f"unknown suite {suite!r}; choose one of {', '.join(suite_names())}, all")
    opts = EvalOptions(
        baselines=parse_baselines(baselines),
        pooling=pooling,  # type: ignore[arg-type]  # click.Choice(POOLINGS) checked it
        resamples=resamples,
        mlp_prompts=mlp_prompts,
        mlp_ks=_ks(mlp_ks),
        mlp_width=mlp_width,
        mlp_epochs=mlp_epochs,
        mlp_lr=mlp_lr,
        gd_steps=gd_steps,
        gd_prompts=gd_prompts,
        mlp_tuned_prompts=mlp_tuned_prompts,
        cost=not no_cost,
        loops=_ks(loops, "--loops"),
    )
    cfg = read_run_config(run_dir)
    test_seed = seed
    for name in names:
        guard(evaluate_estimate(cfg, name, prompts=prompts, seed=test_seed, options=opts), yes)
    out = {}
    for name in names:
        res = evaluate_run(
            run_dir,
            name,
            prompts=prompts,
            seed=seed,
            options=opts,
            force=force,
            progress=False if quiet else None,
        )
        out[name] = res
        if not as_json and not quiet:
            src = "cached" if res.get("from_cache") else f"computed in {res['seconds']:.1f} s"
            click.echo(f"{result_path(run_dir, name)} ({src})")
            for line in _summary_lines(res):
                click.echo(line)
    if as_json:
        emit_json(out[names[0]] if len(names) == 1 else out)
