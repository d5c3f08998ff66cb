"""Evaluate a trained run on a suite: R²/MSE curves of the ICL model and the baselines, cached per run.

``evaluate_run(run_dir, "mixture")`` loads the newest checkpoint
([`load_run`][icdl.icl.training.checkpoint.load_run]), builds the suite ([`suites`][icdl.icl.suites]), draws
each condition's test prompts (seed distinct from training, batches of 64), and for the ICL model and every
baseline computes R²(k) and MSE(k) across prompts with 90 % bootstrap bands
([`metrics.evaluate`][icdl.icl.metrics.evaluate]), plus, for every baseline, a PAIRED bootstrap band of
``R²_ICL(k) - R²_baseline(k)`` on the prompts both saw (the same resampled prompts for both, so the band
reflects the difference, not two independent noises) and its means over k ranges (``1..E`` = within the
training length, ``E+1..K`` = beyond it), with a verdict: ``beats`` (band above 0), ``trails`` (below 0) or
``matches`` (band contains 0).

Results go to ``RUN_DIR/eval/<suite>.json`` (written atomically): the suite definition, the options, the
checkpoint's step and mtime, the config, per-condition label diagnostics (share of exactly-zero labels, label
scale against the training task — the degenerate weight shift is flagged here), curves, comparisons, and the
cost comparison ([`cost`][icdl.icl.training.cost]). A later call with the same request reuses the file unless
the checkpoint is newer (or ``force``).

Baselines (``--baselines``; ``None`` = the suite's default in `SUITE_BASELINES`): ``zero``, ``averaging``,
``least-squares`` (min-norm, intercept), ``ridge`` (λ = 1, intercept), ``knn`` (3), ``mlp`` (the paper's
N-layer width-200 MLP, Adam 5e-3, 100 epochs; BOTH the oracle best epoch and the last epoch; by default on the
first 64 prompts and 5 values of k — it is the costly one, and this is recorded in the results), ``gd`` (plain
GD on the target's bias-free architecture from a seeded w0, 10 steps, step size tuned on held-out prompts),
``ridge_tuned`` (ridge without intercept, λ per k tuned on ``tuned_prompts`` held-out prompts), ``kernel``
(kernel ridge with the covariance of the condition's labels: the NNGP kernel, centred when labels are
standardised; λ likewise; [`kernels`][icdl.icl.baselines.kernel]), ``radial`` (ridge on ``[x, |x| - E|x|]``),
``blup`` (kernel ridge with the task sampler's Monte Carlo label moment, the best linear-in-labels predictor;
[`blup`][icdl.icl.baselines.blup]; in ``all``, not a suite default) and
``mlp_tuned`` (a per-prompt MLP, settings tuned on ``mlp_tune_prompts`` held-out prompts, on the first
``mlp_tuned_prompts`` test prompts; [`mlp_tuned`][icdl.icl.baselines.mlp_tuned]; in ``all``, not a suite
default). When ``ridge_tuned`` is among the baselines every predictor's curve also gets ``skill``
([`metrics.nonlinear_skill`][icdl.icl.metrics.nonlinear_skill] against ``ridge_tuned`` on the same prompts)
and ``skill_ranges`` (its mean over each k range).

Result keys (``conditions.<name>.predictors``) carry the settings: ``least-squares`` -> ``least_squares``,
``ridge`` -> ``ridge_1``, ``knn`` -> ``knn_3``, ``mlp`` -> ``mlp<N>x<width>_best``/``_last``, ``gd`` ->
``gd<N>x<width>_L<steps>``; the name asked for is each curve's ``meta.kind``.
"""

from __future__ import annotations

import datetime as _dt
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from icdl.budget import CPU_FLOPS, Estimate
from icdl.config import Config
from icdl.errors import InputError
from icdl.icl import metrics
from icdl.icl.baselines import kernel as kernels
from icdl.icl.baselines.blup import DEFAULT_TARGETS
from icdl.icl.baselines.gd_target import DEFAULT_LR_GRID as GD_TARGET_LRS
from icdl.icl.baselines.gd_target import DEFAULT_STEPS_GRID as GD_TARGET_STEPS
from icdl.icl.baselines.mlp_tuned import estimate_flops as mlp_tuned_flops
from icdl.icl.evaluation.baseline_runs import TUNED as _TUNED
from icdl.icl.evaluation.baseline_runs import (
    Pred,
    add_skill,
    draw_prompts,
    k_ranges,
    label_diagnostics,
    paired_difference,
    run_baselines,
    run_cost,
    run_info,
)
from icdl.icl.evaluation.cache import seal as cache_seal
from icdl.icl.evaluation.cache import trusted as cache_trusted
from icdl.icl.evaluation.options import (
    BASELINES,
    GD_GRID,
    OPTIONAL_BASELINES,
    POOLINGS,
    SUITE_BASELINES,
    EvalOptions,
    parse_baselines,
)
from icdl.icl.suites import EVAL_SEED, Condition, Suite, build_suite, depth_ks
from icdl.icl.tasks import PromptBatch, sample_batch
from icdl.icl.training.interval import auto_tqdm
from icdl.icl.training.train import find_checkpoint, load_run, refuse_score_run, verify_checkpoint
from icdl.io import atomic_write_json, clean_json, portable_path, read_json
from icdl.nets import NetSpec

__all__ = [
    "BASELINES",
    "FORMAT",
    "GD_GRID",
    "OPTIONAL_BASELINES",
    "POOLINGS",
    "SUITE_BASELINES",
    "EvalOptions",
    "checkpoint_info",
    "depth_sweep",
    "evaluate_estimate",
    "evaluate_run",
    "k_ranges",
    "label_diagnostics",
    "load_result",
    "paired_difference",
    "parse_baselines",
    "result_path",
    "result_status",
]

FORMAT = "icdl-eval-v1"


def result_path(run_dir: str | Path, suite: str) -> Path:
    """``RUN_DIR/eval/<suite>.json``."""
    return Path(run_dir) / "eval" / f"{suite}.json"


def checkpoint_info(run_dir: str | Path) -> dict[str, Any]:
    """``{"name", "step", "mtime"}`` of the run's newest checkpoint, verified against its manifest like
    every read (so ``icdl report`` too refuses a damaged checkpoint); InputError if there is none."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"run directory {str(run_dir)!r} does not exist")
    if not (run_dir / "config.yaml").is_file():
        raise InputError(f"{str(run_dir)!r} is not a run directory (no config.yaml)")
    refuse_score_run(run_dir)
    ck = find_checkpoint(run_dir)
    if ck is None:
        raise InputError(f"run {str(run_dir)!r} has no checkpoint yet")
    verify_checkpoint(ck)
    step = int(ck.name.split("_")[-1]) if ck.name.startswith("step_") else -1
    return {"name": ck.name, "step": step, "mtime": (ck / "model.safetensors").stat().st_mtime}


def load_result(run_dir: str | Path, suite: str) -> dict[str, Any] | None:
    """The cached result of ``suite`` for a run, or None when there is none.

    A cache file that exists but is truncated, corrupt or of another format is an InputError (one line
    naming it) rather than None: recomputing would silently overwrite it; ``--force`` does so on purpose.
    """
    path = result_path(run_dir, suite)
    if not path.exists():
        return None
    data = read_json(path, what="evaluation cache")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(
            f"evaluation cache {str(path)!r} is not an {FORMAT} result; delete it or use --force"
        )
    if not isinstance(data.get("checkpoint"), dict) or not isinstance(data.get("conditions"), dict):
        raise InputError(f"evaluation cache {str(path)!r} is incomplete; delete it or use --force")
    return data


def _is_stale(cached: dict[str, Any], ck: dict[str, Any]) -> bool:
    old = cached.get("checkpoint", {})
    return (
        old.get("name") != ck["name"] or old.get("step") != ck["step"] or ck["mtime"] > old.get("mtime", -1)
    )


def result_status(run_dir: str | Path, suite: str) -> str:
    """``"ok"`` (cached and current), ``"stale"`` (the checkpoint is newer) or ``"missing"``."""
    cached = load_result(run_dir, suite)
    if cached is None:
        return "missing"
    # An edited cache, or one from a checkpoint rewritten at the same step, is stale too
    # (icdl.icl.evaluation.cache).
    stale = _is_stale(cached, checkpoint_info(run_dir)) or not cache_trusted(cached, run_dir)
    return "stale" if stale else "ok"


# --------------------------------------------------------------------------------------------------
# Work estimate (icdl.budget)
# --------------------------------------------------------------------------------------------------


def evaluate_estimate(
    cfg: Config,
    suite: str,
    *,
    prompts: int | None = None,
    seed: int = EVAL_SEED,
    options: EvalOptions | None = None,
) -> Estimate:
    """Memory and time of [`evaluate_run`][icdl.icl.evaluation.evaluate.evaluate_run], from the config alone.

    Per condition: the prompts (``prompts x points x (d_x + d_y)``), the ICL forward passes, the bootstrap
    (a ``resamples x prompts`` count matrix per predictor), the closed-form baselines (a ``d x d`` system
    per prompt and k), the MLP baseline (``mlp_prompts x |ks| x epochs`` full-batch Adam steps of a
    ``task.depth``-layer, ``mlp_width``-wide network) and GD (``gd_prompts x (grid + 1) x gd_steps``
    steps), FLOPs at `icdl.budget.CPU_FLOPS`.
    """
    opts = options or EvalOptions()
    st = build_suite(
        suite, cfg, prompts=prompts, seed=EVAL_SEED + 1 if cfg.train.seed == EVAL_SEED else EVAL_SEED
    )
    names = opts.baselines if opts.baselines is not None else SUITE_BASELINES[suite]
    task, m = cfg.task, cfg.model
    P, R = st.prompts, opts.resamples
    n = max(c.points for c in st.conditions)
    dx, dy = task.dim, task.out_dim
    T = 2 * n
    icl_params = m.layers * (4 * m.d_model**2 + 2 * m.d_model * m.d_mlp)
    net = NetSpec(task.depth, task.width, dx, dy)
    mlp = NetSpec(task.depth, opts.mlp_width, dx, dy)
    n_ks = len(opts.mlp_ks) if opts.mlp_ks is not None else 5
    loop_counts = list(opts.loops or ())
    preds = 1 + len(names) + (1 if "mlp" in names else 0) + len(loop_counts)
    mem = 4 * P * n * (dx + dy) * 8 + 4 * opts.batch * T * m.layers * (
        8 * m.d_model + 2 * m.d_mlp + m.heads * T
    )
    mem += 24 * R * P + 8 * 6 * R * n * dy + 8 * P * n * max(n, dx * dx)
    # a looped model's forward runs its blocks once per pass, at its own and at every --loops count
    passes = (m.loops or 1) + sum(loop_counts)
    flops = 2 * icl_params * P * T * passes + preds * 2 * R * P * n * dy
    flops += sum(2 * P * n * (n * dx * dx + dx**3) for b in names if b in ("least-squares", "ridge"))
    flops += 2 * P * n * n * dx if "knn" in names else 0
    # ridge_tuned / kernel: one T x T Cholesky per prompt and λ (all grid λ on the held-out prompts).
    tuned_chol = (len(kernels.DEFAULT_LAMBDAS) * opts.tuned_prompts + 4 * P) * n**3
    flops += sum(tuned_chol for b in names if b in _TUNED)
    if "blup" in names:  # 2,048 target networks at every test and held-out point
        flops += 2 * DEFAULT_TARGETS * (P + opts.tuned_prompts) * n * (net.num_params + n)
    if "mlp" in names:
        mp = min(opts.mlp_prompts, P)
        mem += 16 * mp * mlp.num_params * 4 + 8 * mp * n * opts.mlp_width * task.depth
        flops += 6 * mp * n_ks * opts.mlp_epochs * n * mlp.num_params
    if "gd_target" in names:  # one trajectory per step size on the tuning prompts, then <= max steps
        grid_steps, most = len(GD_TARGET_LRS) * max(GD_TARGET_STEPS), max(GD_TARGET_STEPS)
        flops += 6 * (opts.gd_tune_prompts * grid_steps + min(opts.gd_prompts, P) * most) * n * net.num_params
    if "mlp_tuned" in names:
        mt = mlp_tuned_flops(n, dx, dy, task.depth, opts.mlp_tune_prompts, min(opts.mlp_tuned_prompts, P))
        flops += int(mt)
    if "gd" in names:
        gp = min(opts.gd_prompts, P)
        flops += 6 * gp * (len(opts.gd_grid) + 1) * opts.gd_steps * n * net.num_params
    flops *= len(st.conditions)
    if opts.cost:
        flops += 6 * opts.batch * opts.mlp_epochs * n * mlp.num_params
        mem += 16 * opts.batch * mlp.num_params * 4
    return Estimate(
        f"icdl evaluate --suite {suite}",
        float(mem + 400 * 2**20),
        float(flops) / CPU_FLOPS + 5.0,
        f"{len(st.conditions)} condition(s) x {P} prompts x {n} points, {R} resamples, baselines "
        + (", ".join(names) or "none"),
    )


# --------------------------------------------------------------------------------------------------
# The evaluation
# --------------------------------------------------------------------------------------------------


def _reference_std(cfg: Config, suite: Suite, points: int) -> float:
    """Label std of the TRAINING task on the test seed (the scale the model was trained on)."""
    pb = sample_batch(cfg.task, 256, seed=suite.seed, step=0, points=points)
    return float(pb.ys.double().std())


def _request(suite: Suite, opts: EvalOptions, baselines: tuple[str, ...]) -> dict[str, Any]:
    return clean_json({"suite": suite.to_dict(), "options": {**opts.to_dict(), "baselines": list(baselines)}})


def _progress(total: int, enabled: bool | None) -> Any:
    disable = (not sys.stderr.isatty()) if enabled is None else not enabled
    return auto_tqdm()(total=total, unit="step", dynamic_ncols=True, disable=disable, leave=False)


def _icl_pred(
    model: Any, pb: PromptBatch, batch: int, device: str, step: int, loops: int | None = None
) -> Pred:
    """The ICL model's predictions on all prompts, ``batch`` prompts per forward pass; ``loops``: a
    looped model run for that many passes (the predictor ``icl_loops{L}``)."""
    t0 = time.perf_counter()
    kw = {} if loops is None else {"loops": loops}
    with torch.no_grad():
        icl = torch.cat(
            [
                model(pb.xs[s : s + batch].to(device), pb.ys[s : s + batch].to(device), **kw).cpu()
                for s in range(0, pb.xs.shape[0], batch)
            ]
        )
    meta: dict[str, Any] = {"prompts": int(pb.xs.shape[0]), "checkpoint_step": step}
    if loops is None:
        return Pred("icl", "icl", icl, time.perf_counter() - t0, meta)
    return Pred(f"icl_loops{loops}", "loops", icl, time.perf_counter() - t0, {**meta, "loops": loops})


def _curves(
    preds: list[Pred],
    icl: Tensor,
    ys: Tensor,
    ranges: list[tuple[int, int]],
    opts: EvalOptions,
    seed: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """R²/MSE curves with bootstrap bands of every predictor, and each baseline's paired comparison
    with the ICL model on the prompts both saw."""
    curves, comps = {}, {}
    for p in preds:
        m = p.preds.shape[0]
        curve = metrics.evaluate(
            p.name,
            p.preds,
            ys[:m].to(p.preds.dtype),
            pooling=opts.pooling,
            resamples=opts.resamples,
            level=opts.level,
            seed=seed,
            meta={"kind": p.kind, "seconds": p.seconds, **p.meta},
        )
        curves[p.name] = curve.to_dict()
        if p.kind != "icl":
            comps[p.name] = {
                "kind": p.kind,
                "prompts": m,
                **paired_difference(
                    icl[:m].double(),
                    p.preds.double(),
                    ys[:m].double(),
                    ranges,
                    pooling=opts.pooling,
                    resamples=opts.resamples,
                    level=opts.level,
                    seed=seed,
                ),
            }
    return curves, comps


def _condition(
    cond: Condition,
    ci: int,
    model: Any,
    cfg: Config,
    st: Suite,
    opts: EvalOptions,
    baselines: Sequence[str],
    device: str,
    step: int,
    bar: Any,
) -> tuple[dict[str, Any], str | None]:
    """One condition of a suite: prompts, ICL and baseline predictions, diagnostics, curves,
    comparisons and skill. Returns the condition's result and a degeneracy warning (or None)."""

    def tick(what: str) -> None:
        bar.set_description(f"{st.name}/{cond.name}: {what}")

    pb = draw_prompts(cond, st.prompts, st.seed)
    ys = pb.ys
    ranges = k_ranges(st.train_examples, ys.shape[1] - 1)
    tick("icl")
    preds = [_icl_pred(model, pb, opts.batch, device, step)]
    for loops in opts.loops or ():  # the same weights at other test-time loop counts
        tick(f"icl, {loops} loops")
        preds.append(_icl_pred(model, pb, opts.batch, device, step, loops))
    bar.update(1)

    def tick_b(what: str) -> None:
        tick(what)
        bar.update(1)

    preds.extend(run_baselines(baselines, cond, pb, cfg, st, opts, tick_b))
    diag = label_diagnostics(ys, _reference_std(cfg, st, cond.points))
    warning = None
    if diag["degenerate"]:
        warning = f"condition {cond.name} ({cond.label}) is degenerate: {'; '.join(diag['reasons'])}"
    curves, comps = _curves(preds, preds[0].preds, ys, ranges, opts, st.seed + ci)
    add_skill(curves, preds, ys, ranges)
    entry = {
        "label": cond.label, "params": cond.params, "points": cond.points,
        "ranges": [list(r) for r in ranges], "diagnostics": diag, "predictors": curves,
        "comparisons": comps,
    }  # fmt: skip
    return entry, warning


def evaluate_run(
    run_dir: str | Path,
    suite: str = "in-distribution",
    *,
    prompts: int | None = None,
    seed: int = EVAL_SEED,
    options: EvalOptions | None = None,
    force: bool = False,
    progress: bool | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Evaluate the run's newest checkpoint on ``suite`` (see the module docstring); returns the results.

    Reuses ``RUN_DIR/eval/<suite>.json`` when it was computed for the same request (suite definition,
    prompts, seed, options) from the same checkpoint, unless ``force``; the returned dict then has
    ``"from_cache": True``. ``progress=None`` shows a bar only on a terminal.
    """
    opts = options or EvalOptions()
    ck = checkpoint_info(run_dir)
    model, cfg = load_run(run_dir, device=device)
    if opts.loops and cfg.model.loops is None:
        raise InputError(f"--loops is for a looped model (model.loops); {run_dir} is not one")
    st = build_suite(suite, cfg, prompts=prompts, seed=seed)
    baselines = opts.baselines if opts.baselines is not None else SUITE_BASELINES[suite]
    request = _request(st, opts, baselines)
    path = result_path(run_dir, suite)
    cached = None if force else load_result(run_dir, suite)
    if (
        cached is not None
        and cached.get("request") == request
        and not _is_stale(cached, ck)
        and cache_trusted(cached, run_dir, request)
    ):
        cached["from_cache"] = True
        return cached

    t_start = time.perf_counter()
    per_cond = 1 + len(baselines)
    bar = _progress(len(st.conditions) * per_cond + (1 if opts.cost else 0), progress)
    conditions: dict[str, Any] = {}
    warnings: list[str] = []
    max_k_all = max(c.points for c in st.conditions) - 1
    try:
        for ci, cond in enumerate(st.conditions):
            entry, warning = _condition(cond, ci, model, cfg, st, opts, baselines, device, ck["step"], bar)
            conditions[cond.name] = entry
            warnings += [warning] if warning else []
        cost = None
        if opts.cost:
            bar.set_description(f"{suite}: cost")
            cost = run_cost(model, cfg, opts, max_k_all, st.seed + 2)
            bar.update(1)
    finally:
        bar.close()

    result = {
        "format": FORMAT,
        "suite": st.to_dict(),
        "request": request,
        "options": request["options"],
        "run": run_info(run_dir, cfg),
        "config": cfg.model_dump(mode="json"),
        "checkpoint": ck,
        "computed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - t_start,
        "threads": torch.get_num_threads(),
        "device": device,
        "conditions": conditions,
        "cost": cost,
        "warnings": warnings + list(st.notes),
        "depth_ks": list(st.ks) if st.ks else list(depth_ks(max_k_all)),
    }
    result = cache_seal(clean_json(result), run_dir, request)
    atomic_write_json(path, result)
    result["from_cache"] = False
    return result


# --------------------------------------------------------------------------------------------------
# Depth sweep (F.3)
# --------------------------------------------------------------------------------------------------


def depth_sweep(
    run_dirs: Sequence[str | Path], *, evaluate_missing: bool = True, **kwargs: Any
) -> list[dict[str, Any]]:
    """R² of the ICL model at the depth-sweep k values (15, 30, 45 scaled) for several runs (F.3).

    Uses each run's cached ``in-distribution`` result when current (same prompts and condition), else
    its ``depth`` suite (evaluated when missing and ``evaluate_missing``). Returns rows ``{"run_dir",
    "attention", "layers", "target_depth", "ks", "r2", "r2_low", "r2_high", "task"}`` sorted by attention and
    layers; runs without results are skipped when ``evaluate_missing`` is False.
    """
    rows = []
    for rd in run_dirs:
        res = None
        for name in ("in-distribution", "depth"):
            if result_status(rd, name) == "ok":
                res = load_result(rd, name)
                break
        if res is None:
            if not evaluate_missing:
                continue
            res = evaluate_run(rd, "depth", **kwargs)
        curve = res["conditions"]["train"]["predictors"]["icl"]
        ks = [k for k in res.get("depth_ks", []) if k < len(curve["r2"])]
        rows.append(
            {
                "run_dir": portable_path(rd),
                "attention": res["run"]["attention"],
                "layers": res["run"]["layers"],
                "target_depth": res["run"]["target_depth"],
                "ks": ks,
                "r2": [curve["r2"][k] for k in ks],
                "r2_low": [curve["r2_low"][k] for k in ks],
                "r2_high": [curve["r2_high"][k] for k in ks],
                "task": res["config"]["task"],
            }
        )
    return sorted(rows, key=lambda r: (r["attention"], r["target_depth"], r["layers"]))
