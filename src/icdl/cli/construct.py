"""``icdl construct``: compile the GD transformer for a network spec, run it on a sampled prompt, verify it.

The prompt (all from ``--seed``, in this order): a random *teacher* network of the same spec with He-scaled
weights ``N(0, 2/fan_in)`` gives the labels ``y = f(w*, x)`` (for the logistic loss ``y = ±1`` by the sign of
``f - median``); inputs ``x_1..x_n, x_query ~ N(0, I)``; the initial weights ``w^(0)`` are drawn like the
teacher's (the paper's ``w^(0) = 0`` is a fixed point for bias-free ReLU networks). A draw whose labels are
all equal or on which GD's gradient never moves w (over the run's own steps, lr and box) is redrawn
(``--raw-task`` keeps it); a task on which GD's movement comes from the projection alone (or nothing) gets
the verdict DEGENERATE and exit code 4 ([`EXIT_DEGENERATE`][icdl.cli.construct.EXIT_DEGENERATE]); a FAIL (a
sublayer beyond tol, a range assumption violated, or a step's gradient error above its a-priori budget:
docs/construction.md, "What PASS guarantees") exits with 5 ([`EXIT_FAIL`][icdl.cli.construct.EXIT_FAIL]) after
printing the report; INCONCLUSIVE (every condition holds, but a step's a-priori budget is not below half its
gradient norm, so it cannot tell GD from no update) exits with 6
([`EXIT_INCONCLUSIVE`][icdl.cli.construct.EXIT_INCONCLUSIVE]).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from icdl.budget import QUICK_SECONDS, Estimate
from icdl.cli import skip_teardown
from icdl.cli._common import (
    POSITIVE_FLOAT,
    VariantChoice,
    check_output,
    emit_json,
    examples,
    guard,
    network_options,
    relu_sum_options_auto,
    threads_option,
    user_error,
    yes_option,
)

if TYPE_CHECKING:
    from icdl.nets import NetSpec

#: Exit code of ``icdl construct`` when reference GD never moves w on the prompt (the check proves nothing).
EXIT_DEGENERATE = 4
#: Exit code of ``icdl construct`` when the verdict is FAIL (the report names every failed condition).
EXIT_FAIL = 5
#: Exit code of ``icdl construct`` when the verdict is INCONCLUSIVE: every condition holds, but some step's
#: a-priori budget is too large to tell its GD update from none (or Corollary 1.1 at the budget exceeds the
#: weights' scale); the report names the steps and what would make them checkable.
EXIT_INCONCLUSIVE = 6


def verdict_exit_code(verdict: str) -> int | None:
    """The exit code of a verify verdict (``PASS``: None, the command ends normally; ``FAIL``:
    [`EXIT_FAIL`][icdl.cli.construct.EXIT_FAIL]; ``DEGENERATE``:
    [`EXIT_DEGENERATE`][icdl.cli.construct.EXIT_DEGENERATE]; ``INCONCLUSIVE``:
    [`EXIT_INCONCLUSIVE`][icdl.cli.construct.EXIT_INCONCLUSIVE]); shared by every command that verifies a
    construction (``icdl construct``, ``icdl score construct``)."""
    return {"FAIL": EXIT_FAIL, "DEGENERATE": EXIT_DEGENERATE, "INCONCLUSIVE": EXIT_INCONCLUSIVE}.get(verdict)


#: The line ``icdl construct`` adds to a FAIL on a range condition at a fixed ``--range``.
RANGE_HINT = (
    "an argument left the fitted range [-R, R]: rerun with --range auto (R from a-priori bounds along this "
    "prompt's whole GD trajectory; docs/construction.md, 'Ranges')"
)


def range_hint(verdict: str, failures: list[str], *, auto: bool) -> bool:
    """Whether to suggest ``--range auto``: the verdict FAILs on the range condition (b) at a fixed R."""
    return verdict == "FAIL" and not auto and any(f.startswith("(b) range") for f in failures)


def exit_on_verdict(verdict: str) -> None:
    """End the command with [`verdict_exit_code`][icdl.cli.construct.verdict_exit_code] unless the verdict
    is PASS (call it after the report is printed)."""
    code = verdict_exit_code(verdict)
    if code is not None:
        sys.exit(code)


#: The verdicts and exit codes, shown at the end of ``icdl construct --help``.
VERDICTS_HELP = """\b
Verdict and exit code (docs/construction.md, "What PASS guarantees"):
  PASS          0  sublayers, ranges and every step's a-priori budget hold, and the budget is
                   small enough to tell each GD step from none
  DEGENERATE    4  GD's movement comes from the projection alone (or nothing): proves nothing
  FAIL          5  a condition failed; the report names each
  INCONCLUSIVE  6  all hold, but a step's budget is not below 1/2 of its gradient norm (or
                   Corollary 1.1 at the budget exceeds 1/2 of ||w_GD||): the report names the
                   steps and what would make them checkable (float64, a larger --lr, a smaller --eps)
FAIL comes first, then DEGENERATE, then INCONCLUSIVE."""


@click.command(
    name="construct",
    epilog=examples(
        "icdl construct -N 3 -K 8 -L 5",
        "icdl construct --activation sigmoid --range auto",
        "icdl construct --variant rows --save saved-model --json",
    )
    + "\n\n"
    + VERDICTS_HELP,
)
@network_options
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
@relu_sum_options_auto
@click.option(
    "--delta",
    type=POSITIVE_FLOAT,
    default=None,
    show_default="1e-9 in float64, 1e-5 in float32",
    help="Window of the relu' step.",
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
    show_default="1e-9 in float64, 1e-4 in float32",
    help="Relative tolerance of the sublayer check.",
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
@threads_option("small")
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
    radius: float | str,
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
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.nets import NetSpec

    # os.path.exists: a name too long or a dangling link is left to check_output, which names the cause.
    if save_dir is not None and os.path.exists(save_dir):
        raise user_error(f"--save: {save_dir} already exists; choose a new directory")
    spec = NetSpec(depth, width, in_dim, out_dim, activation=activation, output=output)  # type: ignore[arg-type]
    task = (examples, seed, raw_task)
    config = _config(
        spec, loss, steps, lr, examples, eps, radius, delta, projection, box, variant, dtype, task
    )
    # Bounded work (icdl.budget): the output is checked and the size estimated before anything is built.
    check_output(save_dir, "--save", directory=True, atomic=True)  # written through a temporary sibling
    estimate = _estimate(spec, config.projection, loss, steps, examples, eps, _widest(config), dtype, variant)
    guard(estimate, yes, max_seconds=QUICK_SECONDS)
    run = _run(
        config,
        spec,
        loss=loss,
        examples=examples,
        seed=seed,
        dtype=dtype,
        tol=tol,
        explain=explain and not as_json,
        raw_task=raw_task,
    )
    if save_dir is not None:
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.construct.store import save

        save(run.model, save_dir)
    result = _result(
        run,
        spec,
        config,
        network=_network(spec),
        options={"loss": loss, "steps": steps, "lr": lr, "examples": examples, "seed": seed, "dtype": dtype},
        task_draws=run.task_draws,
        box=box,
        save_dir=save_dir,
    )
    if explain:
        result["explain"] = run.model.explain_rows()
    if as_json:
        emit_json(result)
    else:
        click.echo(_render(result, run, variant=variant))
    skip_teardown()  # the report is written (and --save's directory and --json's file closed)
    exit_on_verdict(run.report.verdict)


def _prompt(spec: NetSpec, task: tuple[int, int, bool], loss: str, dtype: str, gd: dict[str, Any]) -> Any:
    """The prompt ``(x, y, x_query, w0)`` of ``task = (examples, seed, raw_task)``: the draw `_run` verifies
    on (``gd``: the run's ``lr``, ``steps`` and ``box``, which decide what is degenerate)."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.construct.compile import sample_task_info
    from icdl.construct.config import DTYPES

    examples, seed, raw = task
    t = sample_task_info(
        spec, examples, seed=seed, loss=loss, dtype=DTYPES[dtype], nondegenerate=not raw, **gd
    )
    return (t.x, t.y, t.x_query, t.w0)


def _gd(lr: float, steps: int, projection: str, box: float | None) -> dict[str, Any]:
    """The GD run a draw's degeneracy is judged on (as `_run` passes it from the config)."""
    return {"lr": lr, "steps": steps, "box": box if projection == "box" else None}


def _network(spec: NetSpec) -> dict[str, Any]:
    """The network options of the report (``--json`` key ``network``)."""
    keys = ("depth", "width", "in_dim", "out_dim", "activation", "output")
    return {k: getattr(spec, k) for k in keys}


def _widest(config: Any) -> float:
    """The widest range of ``config`` (R, or the products' weight range): what the closed-form sizes count."""
    return max(config.radius, config.weight_range or 0.0)


def _config(
    spec: NetSpec,
    loss: str,
    steps: int,
    lr: float,
    examples: int,
    eps: float,
    radius: float | str,
    delta: float | None,
    projection: str,
    box: float | None,
    variant: str,
    dtype: str,
    task: tuple[int, int, bool],
) -> Any:
    """The [`GDConfig`][icdl.construct.config.GDConfig] of the command's options (checked there: one line,
    exit 2); ``--range auto`` is resolved on the prompt of ``task = (examples, seed, raw_task)``, before
    the estimate."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.construct import GDConfig

    return GDConfig.create(
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
        prompt=_prompt(spec, task, loss, dtype, _gd(lr, steps, projection, box))
        if radius == "auto"
        else None,
    )


def _estimate(
    spec: NetSpec,
    projection: str,
    loss: str,
    steps: int,
    examples: int,
    eps: float,
    radius: float,
    dtype: str,
    variant: str,
) -> Estimate:
    """Memory and time of compiling and verifying the construction
    ([`icdl.construct.estimate`][icdl.construct.estimate])."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.construct.estimate import construction_estimate

    return construction_estimate(
        spec,
        loss=loss,
        steps=steps,
        examples=examples,
        eps=eps,
        radius=radius,
        projection=projection,  # type: ignore[arg-type]
        itemsize=8 if dtype == "float64" else 4,
        variant=variant,
    )


@dataclass
class _Run:
    """A compiled model, its verification on one sampled prompt, and the times they took."""

    model: Any
    report: Any
    seconds_compile: float
    seconds_forward: float
    task_draws: int


def _run(
    config: Any,
    spec: NetSpec,
    *,
    loss: str,
    examples: int,
    seed: int,
    dtype: str,
    tol: float | None,
    explain: bool,
    raw_task: bool,
) -> _Run:
    """Compile ``config`` and verify it on a prompt sampled from ``seed`` (redrawn while degenerate unless
    ``raw_task``). The model runs once: the forward time is that of the verified run, the sublayer check's
    own time left out ([`trace`][icdl.construct.check.verify.trace])."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.construct import compile_gd_transformer
    from icdl.construct.check.verify import verify
    from icdl.construct.compile import default_tol, sample_task_info

    t0 = time.perf_counter()
    model = compile_gd_transformer(config)
    seconds_compile = time.perf_counter() - t0
    if explain:  # the sublayer list first: it does not depend on the verification
        click.echo(model.explain() + "\n")
    gd = {"lr": config.lr, "steps": config.steps, "box": config.box}
    task = sample_task_info(
        spec, examples, seed=seed, loss=loss, dtype=config.torch_dtype, nondegenerate=not raw_task, **gd
    )
    x, y, xq, w0 = task.x, task.y, task.x_query, task.w0
    report = verify(model, x, y, xq, w0, tol=tol if tol is not None else default_tol(dtype))
    return _Run(model, report, seconds_compile, report.seconds_forward, task.draws)


def _result(
    run: _Run,
    spec: NetSpec,
    config: Any,
    *,
    network: dict[str, Any],
    options: dict[str, Any],
    box: float | None,
    save_dir: str | None,
    task_draws: int,
) -> dict[str, Any]:
    """The ``--json`` object: the model summary, the verify report, and the options that made them."""
    summary = run.model.summary()
    checks = run.report.to_dict()
    return {
        **summary,
        **{k: v for k, v in checks.items() if k != "steps"},
        "per_step": checks["steps"],
        "network": {**network, "num_params": spec.num_params},
        **options,
        "task_draws": task_draws,
        "delta": config.delta,
        "radius": config.radius,
        "weight_range": config.weight_range,
        "range_auto": config.auto_range,
        "projection": config.projection,
        "box": box,
        "seconds_compile": run.seconds_compile,
        "seconds_forward": run.seconds_forward,
        "saved": save_dir,
    }


def _render(result: dict[str, Any], run: _Run, *, variant: str) -> str:
    """The readable report: network, transformer sizes, parameters, times, the verify table, the verdict."""
    r, summary, report = result, run.model.summary(), run.report
    net, p = r["network"], summary["parameters"]
    lines = [
        f"network      N={net['depth']} K={net['width']} d_x={net['in_dim']} d_y={net['out_dim']} "
        f"{net['activation']} (output {net['output']}), "
        f"P={net['num_params']}; loss {r['loss']}; n={r['examples']}; L={r['steps']}; lr={r['lr']:g}; "
        f"{r['dtype']}",
        f"transformer  variant {variant}: {summary['sublayers']} sublayers "
        f"({summary['sublayers_per_step']} per step) + {summary['readout_sublayers']} readout; "
        f"D={summary['embedding_dim']}; max heads {summary['max_heads']}",
        f"parameters   stored {p['stored']:,}  unique {p['unique']:,}  dense (paper form) {p['dense']:,}  "
        f"nonzero {summary['nonzero_parameters']:,}",
        f"ReLU terms   r {summary['terms']['r']}  r' {summary['terms']['r_prime']}  "
        f"u {summary['terms']['u']}",
        f"ranges       R={r['radius']:g}"
        + (f", weights {r['weight_range']:g}" if r["weight_range"] is not None else "")
        + (" (auto: a-priori bounds on this prompt's trajectory" if r["range_auto"] else "")
        + (
            ""
            if not r["range_auto"]
            else ")"
            if r["box"] is None
            else "; with a box at most 2x the exact GD trajectory's maxima, checked by (b))"
        ),
        f"time         compile {run.seconds_compile:.3f}s  forward {run.seconds_forward:.3f}s  "
        f"reference GD {report.seconds_reference:.4f}s",
        "",
        report.table(),
        f"verdict      {report.verdict}"
        + (f" (task drawn {run.task_draws} times)" if run.task_draws > 1 else ""),
    ]
    if range_hint(report.verdict, report.failures, auto=bool(r["range_auto"])):
        lines.append(f"hint         {RANGE_HINT}")
    if r["saved"] is not None:
        lines.append(f"saved        {r['saved']}")
    return "\n".join(lines)
