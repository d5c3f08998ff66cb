"""``icdl train CONFIG [--set key=value ...] [--out DIR]`` — pretrain an ICL transformer.

CONFIG is a preset name (``icdl train --help`` lists every bundled one) or a YAML path.
Resumes when DIR already holds a checkpoint of the same config. Under ``torchrun`` it trains with
DistributedDataParallel (``train.batch_size`` is the global batch). Exit codes: 0 ok (also when the run
was already complete: nothing is trained and that is said), 2 bad input, an unwritable ``--out``, a
damaged run directory or an estimate above the limit (nothing written; ``--yes`` runs a large job
anyway), 3 when the loss became non-finite (the last good checkpoint is kept), 1 only for bugs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from icdl.cli._common import (
    check_output,
    count,
    emit_json,
    examples,
    guard,
    overrides_option,
    threads_option,
    yes_option,
)
from icdl.config import list_presets
from icdl.errors import InputError

_HELP = f"""Pretrain an ICL transformer (resumable; torchrun for data parallel).

CONFIG is a preset name ({", ".join(list_presets())}) or a YAML path. Resumes from --out when it holds a
checkpoint of the same config.
"""

# Exit code of a run stopped by a non-finite loss (1 is reserved for bugs, 2 for bad input).
EXIT_DIVERGED = 3


@click.command(
    name="train",
    help=_HELP,
    epilog=examples("icdl train tiny", "icdl train cpu-small --set train.steps=500 --out runs/short"),
)
@click.argument("config")
@overrides_option
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    default=None,
    show_default="runs/<preset>",
    help="Run directory.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar or summary line.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout when done.")
@click.option(
    "--print-config", is_flag=True, help="Print the resolved config as YAML and exit (writes nothing)."
)
@click.option(
    "--nproc-per-node",
    "nproc",
    type=count(1, 1024),
    default=None,
    help="Data parallel on this node with K worker processes, launched by icdl after the config, "
    "--out and the estimate were checked (like torchrun --standalone --nproc_per_node=K).",
)
@threads_option("large", forward=True)
@yes_option
def train(
    config: str,
    overrides: tuple[str, ...],
    out: Path | None,
    quiet: bool,
    as_json: bool,
    print_config: bool,
    nproc: int | None = None,
    yes: bool = False,
    threads: int | None = None,
) -> None:
    """Pretrain an ICL transformer (resumable; torchrun for data parallel). CONFIG is a bundled preset's
    name (``icdl.config.list_presets``) or a YAML path; resumes from ``--out`` when it holds a
    checkpoint of the same config."""
    # imported when the command runs, for start-up time: `icdl train --help` loads no pydantic config or torch
    from icdl.config import dump_config, load_config

    if threads is not None:  # --threads beats the config's train.threads (a bookkeeping key)
        overrides = (*overrides, f"train.threads={threads}")
    cfg = load_config(config, overrides)
    if print_config:
        click.echo(dump_config(cfg), nl=False)
        return
    # after --print-config, for start-up time: the trainer imports torch
    from icdl.icl.training.train import TrainingDiverged, dist_from_env, find_checkpoint, train_estimate
    from icdl.icl.training.train import train as run_training

    run_dir = out if out is not None else Path("runs") / cfg.name
    check_output(run_dir, "--out", directory=True)
    ckpt = find_checkpoint(run_dir, note=False) if (run_dir / "config.yaml").is_file() else None
    start = int(ckpt.name.rsplit("_", 1)[-1]) if ckpt is not None and ckpt.name[-1:].isdigit() else 0
    guard(train_estimate(cfg, start_step=start), yes)
    if nproc is not None and nproc > 1:
        if dist_from_env().enabled:
            raise InputError("--nproc-per-node under torchrun: use one launcher, not both")
        flags = [*(f"--set={o}" for o in overrides), f"--out={run_dir}", "--yes"]
        flags += ["--quiet"] * quiet + ["--json"] * as_json
        _launch(["train", config, *flags], nproc)
        return
    try:
        result = run_training(cfg, run_dir, quiet=quiet)
    except TrainingDiverged as exc:
        click.echo(f"icdl: error: {' '.join(str(exc).split())}", err=True)
        sys.exit(EXIT_DIVERGED)
    if not dist_from_env().is_main:
        return
    trained = result.step - result.start_step
    summary = {
        "run_dir": str(result.run_dir),
        "steps": result.step,
        "trained_steps": trained,
        "resumed_from": result.start_step,
        "loss": result.loss,
        "label_var": result.label_var,
        "seconds": result.seconds,
        "examples_per_s": result.examples_per_s,
        "parameters": result.num_params,
    }
    if as_json:
        emit_json(summary)
    elif trained == 0:
        click.echo(
            f"nothing to train: run {result.run_dir} is already complete ({result.step} steps); "
            "raise train.steps to continue it",
            err=True,
        )
    elif not quiet:
        loss = "n/a" if result.loss is None else f"{result.loss:.4g}"
        if result.loss is not None and result.label_var:
            loss += f" (label variance {result.label_var:.4g}; ratio {result.loss / result.label_var:.3f})"
        click.echo(
            f"trained {result.step} steps (from {result.start_step}) in {result.seconds:.1f} s; "
            f"loss {loss}; {result.num_params} parameters; run dir {result.run_dir}"
        )  # the command's result, on stdout (the progress bar is on stderr)


def _launch(argv: list[str], nproc: int) -> None:
    """Start the workers (the parent has checked everything a worker would check first) and exit with
    the first failing worker's own code, after one line."""
    from icdl.icl.training.launch import LaunchFailed, launch  # only for --nproc-per-node (start-up time)

    try:
        launch(argv, nproc)
    except LaunchFailed as exc:
        click.echo(f"icdl: error: data-parallel training stopped: {exc} (its message is above)", err=True)
        sys.exit(exc.exit_code)
