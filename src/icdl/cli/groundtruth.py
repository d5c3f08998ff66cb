"""``icdl groundtruth`` — draw labelled ground-truth models for scoring circuit-discovery methods.

Each model is a compiled GD transformer drawn from a stated prior, saved with its ledger (what every hook
point, slot and head holds; the circuit of every GD quantity) and clean and label-flipped prompts
([`icdl.inspect.groundtruth`][icdl.inspect.groundtruth]; docs/interp.md).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from icdl.cli import paused_gc
from icdl.cli._common import (
    BUILTIN_VARIANTS,
    check_output,
    count,
    emit_json,
    examples,
    threads_option,
    user_error,
)

ACTIVATIONS = ("relu", "sigmoid", "tanh", "softplus", "identity")


def _names(value: str, known: tuple[str, ...], option: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [v for v in names if v not in known]
    if not names or unknown:
        raise user_error(
            f"{option}: unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(known)}"
        )
    return names


@click.command(
    epilog=examples(
        "icdl groundtruth --count 100 --seed 0 --out gt",
        "icdl groundtruth --count 20 --variants paper,rows --activations relu --out gt-relu --json",
    )
)
@click.option("--count", "n_models", type=count(1, 100_000), default=100, show_default=True, help="Models.")
@click.option(
    "--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True, help="Seed of the draw."
)
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, help="Directory (an unfinished one is resumed)."
)
@click.option(
    "--variants",
    default=",".join(BUILTIN_VARIANTS),
    show_default=True,
    help="Comma-separated construction variants to draw from.",
)
@click.option(
    "--activations",
    default="relu,relu,sigmoid,tanh",
    show_default=True,
    help="Comma-separated activations, drawn uniformly (repeat one to weight it).",
)
@click.option("--max-depth", type=click.IntRange(2, 8), default=4, show_default=True, help="Depth 2..this.")
@click.option("--max-width", type=click.IntRange(1, 8), default=3, show_default=True, help="Width 1..this.")
@click.option(
    "--max-steps", type=click.IntRange(1, 8), default=3, show_default=True, help="GD steps 1..this."
)
@click.option(
    "--prompts", type=click.IntRange(1, 64), default=4, show_default=True, help="Prompts per model."
)
@click.option("--json", "as_json", is_flag=True, help="Print the index (models and their cards) as JSON.")
@threads_option("small")
def groundtruth(
    n_models: int,
    seed: int,
    out: Path,
    variants: str,
    activations: str,
    max_depth: int,
    max_width: int,
    max_steps: int,
    prompts: int,
    as_json: bool,
) -> None:
    """Write COUNT compiled models drawn from a prior, each with its ground-truth ledger and prompts."""
    chosen = _names(variants, BUILTIN_VARIANTS, "--variants")
    acts = _names(activations, ACTIVATIONS, "--activations")
    check_output(out, "--out", directory=True, atomic=False)
    with paused_gc():  # torch's import: its objects are frozen in the console script (icdl.cli)
        from icdl.icl.training.interval import auto_tqdm
        from icdl.inspect.groundtruth import Prior, write
        from icdl.io import read_json

    prior = Prior(
        variants=chosen,
        activations=acts,
        depth=(2, max_depth),
        width=(1, max_width),
        steps=(1, max_steps),
        prompts=prompts,
    )

    def bar(it: Iterator[int], total: int) -> Iterator[int]:
        return iter(auto_tqdm()(it, total=total, unit="model", disable=not sys.stderr.isatty(), leave=False))

    index = write(out, n_models, seed, prior, progress=bar)
    if as_json:
        emit_json(read_json(index))
        return
    click.echo(f"wrote {n_models} labelled models to {out} (index: {index})")
