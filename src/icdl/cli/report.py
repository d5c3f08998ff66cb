"""``icdl report RUN_DIR [RUN_DIR ...] [--out DIR] [--format png|pdf|svg] [--dpi N]`` — plots and a markdown
report.

Reads the cached results in ``RUN_DIR/eval/``; ``--evaluate auto`` (default) computes a missing
``in-distribution`` suite, ``all`` every missing or stale suite, ``none`` nothing (missing suites are
listed in the report and on stderr with the command that computes them). Exit codes: 0 ok, 2 bad input.
"""

from __future__ import annotations

from pathlib import Path

import click

from icdl.cli import paused_gc
from icdl.cli._common import check_output, count, examples, guard, threads_option, yes_option
from icdl.icl.suites import DEFAULT_PROMPTS, suite_names


@click.command(
    name="report",
    epilog=examples("icdl report runs/tiny", "icdl report runs/tiny runs/cpu-small --out report-both"),
)
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    show_default="RUN_DIR/report for one run, ./report for several",
    help="Output folder.",
)
@click.option(
    "--suites",
    "--suite",
    "suites",
    default=None,
    metavar="LIST",
    show_default="all but depth",
    help=f"Comma-separated suites out of {', '.join(suite_names())}.",
)
@click.option(
    "--evaluate",
    "evaluate",
    type=click.Choice(["auto", "all", "none"]),
    default="auto",
    show_default=True,
    help="Which missing suites to evaluate on demand.",
)
@click.option(
    "--prompts",
    type=count(2),
    default=DEFAULT_PROMPTS,
    show_default=True,
    help="Test prompts for on-demand evaluation.",
)
@click.option(
    "--baselines",
    default=None,
    metavar="LIST",
    show_default="the suite's",
    help="Baselines for on-demand evaluation.",
)
@click.option(
    "--format",
    "figure_format",
    type=click.Choice(["png", "pdf", "svg"]),
    default="png",
    show_default=True,
    help="File format of the figures.",
)
@click.option(
    "--dpi", type=click.IntRange(10, 2400), default=100, show_default=True, help="Resolution of the figures."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar; print only the report path.")
@threads_option("large")
@yes_option
def report(
    run_dirs: tuple[Path, ...],
    out: Path | None,
    suites: str | None,
    evaluate: str,
    prompts: int,
    baselines: str | None,
    figure_format: str,
    dpi: int,
    quiet: bool,
    yes: bool = False,
) -> None:
    """Render plots and a markdown report for one or more runs."""
    with paused_gc():  # torch's import: its objects are frozen in the console script (icdl.cli)
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.icl.evaluation.evaluate import (
            EvalOptions,
            checkpoint_info,
            evaluate_estimate,
            parse_baselines,
        )
        from icdl.icl.evaluation.report import REPORT_SUITES, build_report
        from icdl.icl.suites import EVAL_SEED, suite_names
        from icdl.icl.training.train import read_run_config

    if out is None:
        out = run_dirs[0] / "report" if len(run_dirs) == 1 else Path("report")
    check_output(out, "--out", directory=True)
    names = [s.strip() for s in suites.split(",") if s.strip()] if suites else None
    # On-demand evaluation is the costly part: estimate every suite it may compute, before any work.
    options = EvalOptions(baselines=parse_baselines(baselines))
    wanted = list(REPORT_SUITES if names is None else names)
    todo = {"all": wanted, "auto": [s for s in wanted if s == "in-distribution"], "none": []}[evaluate]
    for rd in run_dirs:
        checkpoint_info(rd)
        for s in todo:
            if s in suite_names():
                est = evaluate_estimate(
                    read_run_config(rd), s, prompts=prompts, seed=EVAL_SEED, options=options
                )
                guard(est, yes)
    rep = build_report(
        list(run_dirs),
        out,
        suites=names,
        evaluate=evaluate,  # type: ignore[arg-type]
        prompts=prompts,
        options=options,
        progress=False if quiet else None,
        figure_format=figure_format,
        dpi=dpi,
    )
    click.echo(str(rep.path))
    if rep.missing and not quiet:
        click.echo(f"icdl: {len(rep.missing)} suite(s) not evaluated; run:", err=True)
        for cmd in rep.missing:
            click.echo(f"  {cmd}", err=True)
