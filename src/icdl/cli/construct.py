"""``icdl construct``: compile the GD transformer for a network spec, run it on a sampled prompt, verify it.

The prompt (all from ``--seed``, in this order): a random *teacher* network of the same spec with He-scaled
weights ``N(0, 2/fan_in)`` gives the labels ``y = f(w*, x)`` (for the logistic loss ``y = ±1`` by the sign of
``f - median``); inputs ``x_1..x_n, x_query ~ N(0, I)``; the initial weights ``w^(0)`` are drawn like the
teacher's (the paper's ``w^(0) = 0`` is a fixed point for bias-free ReLU networks). A draw whose labels are
all equal or whose first GD step leaves ``w^(0)`` where it is is redrawn (``--raw-task`` keeps it); a task on
which GD never moves w gets the verdict DEGENERATE and exit code 4 (:data:`EXIT_DEGENERATE`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import click

from icdl.cli._common import POSITIVE_FLOAT, check_output, emit_json, guard, user_error, yes_option

#: Exit code of ``icdl construct`` when reference GD never moves w on the prompt (the check proves nothing).
EXIT_DEGENERATE = 4


class VariantChoice(click.Choice):
    """``--variant``: the names registered in :mod:`icdl.construct.variants`, looked up when first needed
    (so that ``icdl --help`` does not import torch)."""

    def __init__(self) -> None:
        super().__init__([], case_sensitive=True)

    @property  # type: ignore[override]
    def choices(self) -> Sequence[str]:
        from icdl.construct.variants import VARIANTS

        return tuple(VARIANTS)

    @choices.setter
    def choices(self, value: Sequence[str]) -> None:  # click's __init__ assigns it; the registry rules
        pass


@click.command(name="construct")
@click.option(
    "--depth", "-N", type=click.IntRange(min=2), default=3, show_default=True, help="Network depth N."
)
@click.option(
    "--width", "-K", type=click.IntRange(min=1), default=8, show_default=True, help="Hidden width K."
)
@click.option("--in-dim", type=click.IntRange(min=1), default=4, show_default=True, help="Input dim d_x.")
@click.option("--out-dim", type=click.IntRange(min=1), default=1, show_default=True, help="Output dim d_y.")
@click.option(
    "--activation", default="relu", show_default=True, help="relu, sigmoid, tanh, softplus, identity."
)
@click.option("--loss", default="squared", show_default=True, help="squared, huber or logistic.")
@click.option(
    "--output",
    type=click.Choice(["same", "linear"]),
    default="same",
    show_default=True,
    help="Activation at the output layer: same as hidden (paper) or linear.",
)
@click.option("--steps", "-L", type=click.IntRange(min=0), default=5, show_default=True, help="GD steps L.")
@click.option("--lr", type=POSITIVE_FLOAT, default=0.1, show_default=True, help="GD step size eta.")
@click.option(
    "--examples",
    "-n",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="In-context examples n (the prompt has n+1 tokens).",
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**63 - 1),
    default=0,
    show_default=True,
    help="Seed of the sampled prompt.",
)
@click.option(
    "--dtype",
    type=click.Choice(["float64", "float32"]),
    default="float64",
    show_default=True,
    help="Floating type of the weights and the prompt (float64 to verify exactness).",
)
@click.option(
    "--eps",
    type=POSITIVE_FLOAT,
    default=1e-3,
    show_default=True,
    help="Target sup error of each fitted ReLU sum (smooth activations, non-squared losses).",
)
@click.option(
    "--range",
    "radius",
    type=POSITIVE_FLOAT,
    default=10.0,
    show_default=True,
    help="Range [-R, R] of the fitted ReLU sums.",
)
@click.option(
    "--delta",
    type=POSITIVE_FLOAT,
    default=None,
    help="Window of the relu' step (default 1e-9 in float64, 1e-5 in float32).",
)
@click.option(
    "--projection",
    type=click.Choice(["none", "box"]),
    default="none",
    show_default=True,
    help="Proj_W of eq. (2.3): none (plain GD) or the box |w_c| <= B (with --box B).",
)
@click.option("--box", type=POSITIVE_FLOAT, default=None, help="Box bound B for --projection box.")
@click.option(
    "--variant",
    type=VariantChoice(),
    default="paper",
    show_default=True,
    help="Construction variant (docs/construction.md compares them).",
)
@click.option(
    "--tol",
    type=POSITIVE_FLOAT,
    default=None,
    help="Relative tolerance of the sublayer check (default 1e-9 in float64, 1e-4 in float32).",
)
@click.option(
    "--save",
    "save_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write safetensors weights + model.json to this new directory.",
)
@click.option(
    "--raw-task",
    is_flag=True,
    help="Keep the seed's first prompt even when degenerate (labels all equal or GD never moves w).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--explain",
    is_flag=True,
    help="List every sublayer (name, kind, lemma, heads, reads -> writes) before the verification.",
)
@yes_option
def construct(
    depth: int,
    width: int,
    in_dim: int,
    out_dim: int,
    activation: str,
    loss: str,
    output: str,
    steps: int,
    lr: float,
    examples: int,
    seed: int,
    dtype: str,
    eps: float,
    radius: float,
    delta: float | None,
    projection: str,
    box: float | None,
    variant: str,
    tol: float | None,
    save_dir: str | None,
    raw_task: bool,
    as_json: bool,
    explain: bool,
    yes: bool = False,
) -> None:
    """Compile a GD transformer (Theorem 1's construction or a variant) and verify it against reference GD."""
    from pathlib import Path

    from icdl.budget import QUICK_SECONDS
    from icdl.construct import GDConfig, compile_gd_transformer
    from icdl.construct.compile import sample_task_info
    from icdl.construct.store import save
    from icdl.construct.verify import verify
    from icdl.nets import NetSpec
    from icdl.theory import construction_estimate

    if save_dir is not None and Path(save_dir).exists():
        raise user_error(f"--save: {save_dir} already exists; choose a new directory")
    spec = NetSpec(depth, width, in_dim, out_dim, activation=activation, output=output)  # type: ignore[arg-type]
    config = GDConfig.create(
        spec,
        projection=projection,
        box=box,
        loss=loss,
        lr=lr,
        steps=steps,
        n=examples,
        eps=eps,
        radius=radius,
        delta=delta,
        variant=variant,
        dtype=dtype,
    )
    # Bounded work (icdl.budget): the output is checked and the size estimated before anything is built.
    check_output(save_dir, "--save", directory=True)
    estimate = construction_estimate(
        spec,
        loss=loss,
        steps=steps,
        examples=examples,
        eps=eps,
        radius=radius,
        projection=config.projection,  # type: ignore[arg-type]
        itemsize=8 if dtype == "float64" else 4,
        variant=variant,
    )
    guard(estimate, yes, max_seconds=QUICK_SECONDS)
    t0 = time.perf_counter()
    model = compile_gd_transformer(config)
    seconds_compile = time.perf_counter() - t0
    if explain and not as_json:  # the sublayer list first: it does not depend on the verification
        click.echo(model.explain() + "\n")
    task = sample_task_info(
        spec, examples, seed=seed, loss=loss, dtype=config.torch_dtype, nondegenerate=not raw_task
    )
    x, y, xq, w0 = task.x, task.y, task.x_query, task.w0
    H = model.build_prompt(x, y, xq, w0)
    t0 = time.perf_counter()
    model(H)  # untraced forward pass: the time the transformer itself takes
    seconds_forward = time.perf_counter() - t0
    report = verify(
        model, x, y, xq, w0, tol=tol if tol is not None else (1e-9 if dtype == "float64" else 1e-4)
    )
    if save_dir is not None:
        save(model, save_dir)

    summary = model.summary()
    checks = report.to_dict()
    result: dict[str, Any] = {
        **summary,
        **{k: v for k, v in checks.items() if k != "steps"},
        "per_step": checks["steps"],
        "network": {
            "depth": depth,
            "width": width,
            "in_dim": in_dim,
            "out_dim": out_dim,
            "activation": activation,
            "output": output,
            "num_params": spec.num_params,
        },
        "loss": loss,
        "steps": steps,
        "lr": lr,
        "examples": examples,
        "seed": seed,
        "task_draws": task.draws,
        "dtype": dtype,
        "delta": config.delta,
        "projection": config.projection,
        "box": box,
        "seconds_compile": seconds_compile,
        "seconds_forward": seconds_forward,
        "saved": save_dir,
    }
    if explain:
        result["explain"] = model.explain_rows()
    if as_json:
        emit_json(result)
        _exit_on_verdict(report.verdict)
        return
    p = summary["parameters"]
    lines = [
        f"network      N={depth} K={width} d_x={in_dim} d_y={out_dim} {activation} (output {output}), "
        f"P={spec.num_params}; loss {loss}; n={examples}; L={steps}; lr={lr:g}; {dtype}",
        f"transformer  variant {variant}: {summary['sublayers']} sublayers "
        f"({summary['sublayers_per_step']} per step) + {summary['readout_sublayers']} readout; "
        f"D={summary['embedding_dim']}; max heads {summary['max_heads']}",
        f"parameters   stored {p['stored']:,}  unique {p['unique']:,}  dense (paper form) {p['dense']:,}  "
        f"nonzero {summary['nonzero_parameters']:,}",
        f"ReLU terms   r {summary['terms']['r']}  r' {summary['terms']['r_prime']}  "
        f"u {summary['terms']['u']}",
        f"time         compile {seconds_compile:.3f}s  forward {seconds_forward:.3f}s  "
        f"reference GD {report.seconds_reference:.4f}s",
        "",
        report.table(),
        f"verdict      {report.verdict}" + (f" (task drawn {task.draws} times)" if task.draws > 1 else ""),
    ]
    if save_dir is not None:
        lines.append(f"saved        {save_dir}")
    click.echo("\n".join(lines))
    _exit_on_verdict(report.verdict)


def _exit_on_verdict(verdict: str) -> None:
    """Exit :data:`EXIT_DEGENERATE` for a DEGENERATE verdict (PASS and FAIL exit 0 as before)."""
    if verdict == "DEGENERATE":
        sys.exit(EXIT_DEGENERATE)
