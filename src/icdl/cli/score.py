"""``icdl score train|evaluate|sample|construct`` — in-context score estimation for diffusion models.

* ``train PRESET`` pretrains the ICL score model (preset ``score-small`` or a YAML path);
* ``evaluate RUN`` writes score-error curves per k against the baselines (``--plot PNG``);
* ``sample RUN`` runs the reverse-time sampler driven by each estimator's in-context score and reports
  sliced W2 / MMD to the true distribution per k (``--plot`` / ``--samples-plot`` PNGs);
* ``construct`` compiles the GD transformer on the score network (d_x = d + 1, d_y = d) and verifies it
  against reference GD on the DSM (squared) loss; its verdict (PASS / FAIL / DEGENERATE / INCONCLUSIVE),
  exit codes (5 on FAIL, 4 on DEGENERATE, 6 on INCONCLUSIVE) and redrawing of a degenerate prompt
  (``--raw-task`` keeps it) are those of ``icdl construct``.

Bad input exits with code 2 and one line on stderr (``icdl.errors.InputError``); see docs/score.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from icdl.budget import QUICK_SECONDS
from icdl.cli._common import (
    POSITIVE_FLOAT,
    SEED,
    check_output,
    count,
    emit_json,
    examples,
    guard,
    overrides_option,
    threads_option,
    yes_option,
)
from icdl.errors import InputError
from icdl.io import atomic_write_text, portable_path


def _write_json(path: Path, obj: Any) -> None:
    """Write atomically (icdl.io): never a half-written file. NaN is kept (``k`` a baseline skipped)."""
    atomic_write_text(path, json.dumps(obj, indent=1, allow_nan=True) + "\n")


def _check_png(path: Path | None) -> None:
    if path is not None and path.suffix.lower() != ".png":
        raise InputError(f"plot path must end in .png, got {str(path)!r}")


def _ks(text: str) -> list[int]:
    try:
        ks = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--ks must be comma-separated integers, got {text!r}") from None
    if not ks:
        raise InputError("--ks is empty")
    return ks


def _mlp(depth: int, width: int, epochs: int, lr: float, ks: list[int] | None = None) -> Any:
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.diffusion.baselines import ContextMLP

    if depth < 1 or width < 1 or epochs < 0:
        raise InputError("--mlp-depth and --mlp-width must be >= 1, --mlp-epochs >= 0")
    return ContextMLP(depth=depth, width=width, epochs=epochs, lr=lr, ks=ks)


_MLP_OPTIONS = [
    click.option(
        "--mlp-depth", type=count(1), default=3, show_default=True, help="Layers of the context-trained net."
    ),
    click.option(
        "--mlp-width", type=count(1), default=64, show_default=True, help="Width of the context-trained net."
    ),
    click.option(
        "--mlp-epochs",
        type=count(0),
        default=100,
        show_default=True,
        help="Adam steps per context (0: untrained).",
    ),
    click.option(
        "--mlp-lr", type=POSITIVE_FLOAT, default=3e-4, show_default=True, help="Adam step size of the net."
    ),
    click.option("--no-mlp", is_flag=True, help="Skip the context-trained network."),
]


def _with_mlp_options(fn: Any) -> Any:
    for opt in reversed(_MLP_OPTIONS):
        fn = opt(fn)
    return fn


def _with_tuned_options(fn: Any) -> Any:
    """``--baselines`` / ``--tune-prompts`` / ``--tune-seed``: the baselines of icdl.diffusion.tuning."""
    for opt in (
        click.option(
            "--tune-seed", type=click.IntRange(0), default=999, show_default=True,
            help="Seed of the held-out tuning prompts (must differ from --seed).",
        ),
        click.option(
            "--tune-prompts", type=click.IntRange(2, 100_000), default=256, show_default=True,
            help="Held-out prompts the tuned baselines are chosen on.",
        ),
        click.option(
            "--baselines", "baselines_text", default="gd_prior,kde,mixture_fit", show_default=True,
            help="Tuned baselines (comma-separated; 'none' for none).",
        ),
    ):  # fmt: skip
        fn = opt(fn)
    return fn


def _baseline_names(text: str) -> list[str]:
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.diffusion.tuning import BASELINES

    names = [] if text.strip() == "none" else [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise InputError(f"unknown --baselines {', '.join(unknown)}; known: {', '.join(BASELINES)} or none")
    return names


def _run_or_preset(fn: Any) -> Any:
    """``RUN`` (a trained score run) or ``--baselines-only PRESET`` (the baselines on a preset's task)."""
    fn = click.option(
        "--baselines-only",
        "preset",
        default=None,
        metavar="PRESET",
        help="No ICL model: baselines on a preset's task.",
    )(fn)
    fn = click.option(
        "--allow-unfinished",
        is_flag=True,
        help="Use RUN even when its training stopped before train.steps (killed, interrupted, diverged).",
    )(fn)
    return click.argument("run", type=click.Path(path_type=Path), required=False)(fn)


@click.group(name="score", epilog=examples("icdl score train score-small", "icdl score construct -d 2 -L 5"))
def score() -> None:
    """In-context score estimation for diffusion models (docs/score.md).

    Each prompt holds pairs ((x_t, t), y) of a fresh Gaussian mixture diffused by the OU process, with
    the denoising score-matching target y; the model must estimate the score in context.
    """


@score.command(
    name="train", epilog=examples("icdl score train score-small --set train.steps=200 --out runs/score-short")
)
@click.argument("config")
@overrides_option
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    show_default="runs/<preset>",
    help="Run directory; a run already in it is resumed from its newest checkpoint.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout when done.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
@click.option("--print-config", is_flag=True, help="Print the resolved config as YAML and exit.")
@threads_option("large", forward=True)
@yes_option
def train_cmd(
    config: str,
    overrides: tuple[str, ...],
    out: Path | None,
    as_json: bool,
    quiet: bool,
    print_config: bool,
    yes: bool = False,
    threads: int | None = None,
) -> None:
    """Pretrain (or resume) the ICL score model. CONFIG: a score preset (score-small) or a YAML path.

    The run directory has the layout of icdl train (checkpoints, manifests, metrics.jsonl, a lock);
    exit codes as for icdl train: 2 bad input, 3 a non-finite loss (the run stops), 130 interrupted
    (resumable).
    """
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.diffusion.budget import score_train_estimate
    from icdl.diffusion.config import dump_score_config, load_score_config

    if threads is not None:  # --threads beats the config's train.threads
        overrides = (*overrides, f"train.threads={threads}")
    cfg = load_score_config(config, overrides)
    if print_config:
        click.echo(dump_score_config(cfg), nl=False)
        return
    run_dir = out if out is not None else Path("runs") / cfg.name
    check_output(run_dir, "--out", directory=True)
    guard(score_train_estimate(cfg), yes)
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.diffusion.train import ScoreTrainingDiverged, train_score

    try:
        result = train_score(cfg, run_dir, quiet=quiet or as_json)
    except ScoreTrainingDiverged as exc:
        click.echo(f"icdl: error: {' '.join(str(exc).split())}", err=True)
        sys.exit(3)
    summary = {
        "run_dir": str(result.run_dir),
        "steps": result.steps,
        "resumed_from": result.start_step,
        "loss": result.loss,
        "seconds": result.seconds,
        "parameters": result.num_params,
    }
    if as_json:
        emit_json(summary)
    elif not quiet:
        resumed = f" (resumed from step {result.start_step})" if result.start_step else ""
        loss = "n/a (nothing left to train)" if result.loss is None else f"{result.loss:.4g}"
        click.echo(
            f"trained {result.steps} steps{resumed} in {result.seconds:.1f} s; loss {loss}; "
            f"{result.num_params} parameters; run dir {result.run_dir}",
            err=True,
        )


def _load(run: Path | None, preset: str | None, allow_unfinished: bool) -> tuple[Any, Any]:
    """The trained model and config of RUN (refused when its training did not finish, unless
    ``allow_unfinished``), or no model and the config of PRESET."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.diffusion.config import load_score_config
    from icdl.diffusion.train import check_finished, load_score_run

    if run is None and preset is None:
        raise InputError("give a RUN directory, or --baselines-only PRESET")
    if run is not None:
        model, cfg = load_score_run(run)
        check_finished(run, cfg, allow=allow_unfinished)
        return model, cfg
    return None, load_score_config(preset or "")


@score.command(
    name="evaluate",
    epilog=examples(
        "icdl score evaluate runs/score-small --plot score-curves.png",
        "icdl score evaluate --baselines-only score-small",
    ),
)
@_run_or_preset
@click.option(
    "--prompts", type=click.IntRange(2, 100_000), default=256, show_default=True, help="Test prompts."
)
@click.option(
    "--seed",
    type=SEED,
    default=12345,
    show_default=True,
    help="Seed of the test prompts.",
)
@click.option(
    "--mlp-ks", default="1,5,10,20,40", show_default=True, help="k values for the context-trained net."
)
@_with_mlp_options
@click.option(
    "--gd-steps",
    type=click.IntRange(0, 10_000),
    default=10,
    show_default=True,
    help="GD steps L of the bias-free score-net baseline (0: skip it).",
)
@click.option(
    "--gd-lr", type=POSITIVE_FLOAT, default=0.03, show_default=True, help="GD step size of that baseline."
)
@click.option(
    "--gd-width",
    type=click.IntRange(1, 1024),
    default=16,
    show_default=True,
    help="Width K of its 3-layer network.",
)
@click.option(
    "--resamples",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="Bootstrap resamples.",
)
@_with_tuned_options
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Write the result JSON here.")
@click.option("--plot", type=click.Path(path_type=Path), default=None, help="Write the curves to this PNG.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@threads_option("large")
@yes_option
def evaluate_cmd(
    run: Path | None, preset: str | None, prompts: int, seed: int, mlp_ks: str, mlp_depth: int,
    mlp_width: int, mlp_epochs: int, mlp_lr: float, no_mlp: bool, gd_steps: int, gd_lr: float, gd_width: int,
    resamples: int, out: Path | None, plot: Path | None, as_json: bool, yes: bool = False,
    allow_unfinished: bool = False, baselines_text: str = "none", tune_prompts: int = 256,
    tune_seed: int = 999,
) -> None:  # fmt: skip
    """Score-error curves per number of in-context examples, against baselines (90% bootstrap bands).

    Estimators: the ICL model, a context-trained MLP, plain GD on the bias-free ReLU score network (what
    icdl score construct compiles), the prior -x, the task's population score, a Gaussian fit, the
    empirical score, and the --baselines tuned on held-out prompts (--tune-seed): GD from the start that
    outputs -x (at --mlp-ks), a KDE and a mixture fit.
    """
    _check_png(plot)
    check_output(out, "--out")
    check_output(plot, "--plot")
    ks = _ks(mlp_ks)
    names = _baseline_names(baselines_text)
    if names and tune_seed == seed:
        raise InputError(f"--tune-seed must differ from --seed (the test prompts), both are {seed}")
    mlp = None if no_mlp else _mlp(mlp_depth, mlp_width, mlp_epochs, mlp_lr, ks)
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.diffusion.baselines import GDScore
    from icdl.diffusion.budget import score_curves_estimate

    gd = GDScore(depth=3, width=gd_width, lr=gd_lr, steps=gd_steps, ks=ks) if gd_steps > 0 else None
    model, cfg = _load(run, preset, allow_unfinished)
    est = score_curves_estimate(
        cfg, prompts=prompts, mlp_ks=0 if no_mlp else len(ks), mlp_epochs=mlp_epochs, mlp_depth=mlp_depth,
        mlp_width=mlp_width, gd_steps=gd_steps, gd_width=gd_width, resamples=resamples, tuned=names,
        tune_prompts=tune_prompts,
    )  # fmt: skip
    guard(est, yes)
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.diffusion.evaluate import score_curves
    from icdl.diffusion.tuning import tuned_baselines

    tuned = tuned_baselines(cfg, names, prompts=tune_prompts, seed=tune_seed, test_seed=seed, gd_ks=ks)
    res = score_curves(
        model, cfg, prompts=prompts, seed=seed, mlp=mlp, gd=gd, tuned=tuned, resamples=resamples
    )
    res["run"] = None if run is None else portable_path(run)
    if out is not None:
        _write_json(out, res)
    if plot is not None:
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.diffusion.plots import plot_score_curves

        plot_score_curves(res, plot)
    if as_json:
        emit_json(res)
        return
    ks_show = [k for k in (0, 1, 5, 10, 20, 40) if k < len(res["k"])]
    click.echo("h-weighted score error at k = " + ", ".join(map(str, ks_show)))
    for name, c in res["score_error"].items():
        click.echo(f"  {name:<14}" + " ".join(f"{c['mse'][k]:9.4f}" for k in ks_show))


@score.command(
    name="sample", epilog=examples("icdl score sample runs/score-small --ks 5,10,20 --plot w2.png")
)
@_run_or_preset
@click.option(
    "--ks", "ks_text", default="5,10,20,40", show_default=True, help="Context sizes k (comma-separated)."
)
@click.option("--prompts", type=click.IntRange(1, 1000), default=16, show_default=True, help="Test mixtures.")
@click.option(
    "--samples", type=click.IntRange(2, 100_000), default=500, show_default=True, help="Samples per run."
)
@click.option("--steps", type=click.IntRange(1, 10_000), default=50, show_default=True, help="Sampler steps.")
@click.option(
    "--method",
    type=click.Choice(["ode", "sde"]),
    default="ode",
    show_default=True,
    help="Probability-flow ODE (Heun) or reverse SDE (Euler-Maruyama).",
)
@click.option(
    "--seed",
    type=SEED,
    default=777,
    show_default=True,
    help="Seed of mixtures and sampler.",
)
@_with_mlp_options
@_with_tuned_options
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Write the result JSON here.")
@click.option("--plot", type=click.Path(path_type=Path), default=None, help="Distance-per-k plot (PNG).")
@click.option(
    "--samples-plot",
    type=click.Path(path_type=Path),
    default=None,
    help="Samples of the first prompt at the largest k (PNG).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@threads_option("large")
@yes_option
def sample_cmd(
    run: Path | None, preset: str | None, ks_text: str, prompts: int, samples: int, steps: int, method: str,
    seed: int, mlp_depth: int, mlp_width: int, mlp_epochs: int, mlp_lr: float, no_mlp: bool, out: Path | None,
    plot: Path | None, samples_plot: Path | None, as_json: bool, yes: bool = False,
    allow_unfinished: bool = False, baselines_text: str = "none", tune_prompts: int = 256,
    tune_seed: int = 999,
) -> None:  # fmt: skip
    """Sample with the in-context score and measure sliced W2 / MMD to the true distribution per k.

    90 % bootstrap bands over the --prompts mixtures, and paired bands of each baseline minus ICL.
    """
    _check_png(plot)
    _check_png(samples_plot)
    for path, option in ((out, "--out"), (plot, "--plot"), (samples_plot, "--samples-plot")):
        check_output(path, option)
    ks = _ks(ks_text)
    names = _baseline_names(baselines_text)
    if names and tune_seed == seed:
        raise InputError(f"--tune-seed must differ from --seed (the test mixtures), both are {seed}")
    mlp = None if no_mlp else _mlp(mlp_depth, mlp_width, mlp_epochs, mlp_lr)
    model, cfg = _load(run, preset, allow_unfinished)
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.diffusion.budget import sampling_estimate

    est = sampling_estimate(
        cfg, ks=ks, prompts=prompts, samples=samples, steps=steps, mlp_epochs=0 if no_mlp else mlp_epochs,
        mlp_depth=mlp_depth, mlp_width=mlp_width, tuned=names, tune_prompts=tune_prompts,
    )  # fmt: skip
    guard(est, yes)
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.diffusion.evaluate import sampling_distances
    from icdl.diffusion.tuning import tuned_baselines

    tuned = tuned_baselines(cfg, names, prompts=tune_prompts, seed=tune_seed, test_seed=seed, gd_ks=ks)
    res = sampling_distances(
        model, cfg, ks=ks, prompts=prompts, samples=samples, steps=steps, method=method,  # type: ignore[arg-type]
        seed=seed, mlp=mlp, tuned=tuned, keep_samples=samples_plot is not None,
    )  # fmt: skip
    kept = res.pop("samples_first_prompt", None)
    res["run"] = None if run is None else portable_path(run)
    if out is not None:
        _write_json(out, res)
    if plot is not None:
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.diffusion.plots import plot_distances

        plot_distances(res, plot)
    if samples_plot is not None and kept is not None:
        # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
        from icdl.diffusion.plots import plot_samples

        plot_samples(kept, samples_plot, f"{method} sampler, k = {res['ks'][-1]} context points (x)")
    if as_json:
        emit_json(res)
        return
    click.echo(f"sliced W2 to p_0 at k = {', '.join(map(str, res['ks']))} ({method}, {prompts} prompts)")
    for name, vals in res["sw"].items():
        click.echo(f"  {name:<14}" + " ".join(f"{v:8.3f}" for v in vals))
    f = res["floor"]
    click.echo(f"  exact score {f['exact_sw']:.3f}; two true samples {f['true_sw']:.3f}")


@score.command(
    name="construct",
    epilog=examples("icdl score construct -d 2 -N 3 -K 8 -L 5", "icdl score construct --json"),
)
@click.option(
    "--dim",
    "-d",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Data dimension d (d_x = d + 1, d_y = d).",
)
@click.option(
    "--depth", "-N", type=click.IntRange(2, 12), default=3, show_default=True, help="Score-network depth N."
)
@click.option(
    "--width", "-K", type=click.IntRange(1, 64), default=8, show_default=True, help="Score-network width K."
)
@click.option(
    "--examples",
    "-n",
    type=click.IntRange(1, 512),
    default=32,
    show_default=True,
    help="In-context examples n (the default of icdl construct).",
)
@click.option("--steps", "-L", type=click.IntRange(0, 200), default=5, show_default=True, help="GD steps L.")
@click.option("--lr", type=POSITIVE_FLOAT, default=0.01, show_default=True, help="GD step size.")
@click.option(
    "--seed",
    type=SEED,
    default=0,
    show_default=True,
    help="Seed of the prompt and w0.",
)
@click.option(
    "--raw-task",
    is_flag=True,
    help="Keep the seed's first prompt even when degenerate (GD never moves w).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verification summary as one JSON object.")
@threads_option("small")
@yes_option
def construct_cmd(
    dim: int,
    depth: int,
    width: int,
    examples: int,
    steps: int,
    lr: float,
    seed: int,
    raw_task: bool,
    as_json: bool,
    yes: bool,
) -> None:
    """Compile GD on the DSM loss of a ReLU score network and verify it against reference GD (float64).

    The verdict is that of icdl construct (docs/construction.md, "What PASS guarantees"): FAIL (exit 5) names
    each failed condition, DEGENERATE (exit 4) a prompt on which GD's gradient never moves w, INCONCLUSIVE
    (exit 6) a check whose budget cannot tell some step's GD update from none. As in icdl construct, a
    degenerate prompt is redrawn (task_draws counts the draws) unless --raw-task.
    """
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.cli.construct import exit_on_verdict
    from icdl.construct import verify
    from icdl.diffusion.budget import score_construct_estimate
    from icdl.diffusion.construct import compile_score_gd, score_gd_prompt_info

    # Bounded work: refused from closed-form sizes before anything is built, as in ``icdl construct``.
    est = score_construct_estimate(dim, depth, width, examples=examples, steps=steps)
    guard(est, yes, max_seconds=QUICK_SECONDS)

    model = compile_score_gd(dim, depth, width, lr=lr, steps=steps, n=examples)
    prompt = score_gd_prompt_info(dim, depth, width, examples, seed=seed, nondegenerate=not raw_task)
    rep = verify(model, *prompt.astuple())
    summary = {
        "dim": dim, "d_x": dim + 1, "d_y": dim, "depth": depth, "width": width, "examples": examples,
        "steps": steps, "lr": lr, "seed": seed, "task_draws": prompt.draws,
        "verdict": rep.verdict, "failures": rep.failures, "passed": rep.passed,
        "inconclusive": rep.inconclusive, "uncheckable_steps": rep.uncheckable_steps,
        "weights_moved": rep.weights_moved, "degenerate": rep.degenerate,
        "eps_grad": rep.eps_grad, "grad_budget": rep.grad_budget,
        "corollary_bound_budget": rep.corollary_bound_budget, "trajectory_error": rep.trajectory_error,
        "max_abs_err_weights": rep.max_abs_err_weights, "max_abs_err_prediction": rep.max_abs_err_prediction,
        "max_abs_err_f": rep.max_abs_err_f, "prediction_bound": rep.prediction_bound,
        "sublayers": model.num_sublayers, "embedding_dim": model.embedding_dim,
    }  # fmt: skip
    if as_json:
        emit_json(summary)
    else:
        click.echo(rep.table())
        drawn = f" (task drawn {prompt.draws} times)" if prompt.draws > 1 else ""
        click.echo(f"verdict      {rep.verdict}{drawn}")
    exit_on_verdict(rep.verdict)
