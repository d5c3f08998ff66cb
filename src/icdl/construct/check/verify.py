"""Verify a compiled GD transformer against reference gradient descent, sublayer by sublayer.

[`verify`][icdl.construct.check.verify.verify] is three steps with no knowledge of any role or variant:
[`trace`][icdl.construct.check.verify.trace] runs the model on one prompt and keeps the state after every
sublayer (named ``(step, sublayer name)``, step None for the readout);
[`compare`][icdl.construct.check.verify.compare] checks every state against what the variant's expected
effects ([`icdl.construct.build.contract`][icdl.construct.build.contract]) say must be in each slot;
[`report`][icdl.construct.check.verify.report] adds the GD comparisons below. It compares

1. **the whole token state after every sublayer** with what the construction must produce — the
   *surrogate* recursion: the paper's p̄, r̄', ḡ, s̄ (Lemmas 2-5, eq. (C.6), (3.20)) evaluated directly with
   the same conditioned ReLU sums the heads use, at the transformer's own current w. Any disagreement beyond
   ``tol * max(1, |expected|)`` is a construction bug (or a rounding problem); the FIRST such sublayer is
   reported (step, sublayer name, slot; NaN and inf are divergences and reported as such). For ReLU networks
   the surrogate *is* exact GD (outside the relu' window), so the same check also proves agreement with GD;
2. per step, the errors of p, r', u, s against the **exact** Lemma 1 terms at the transformer's w
   ([`icdl.nets.lemma1_terms`][icdl.nets.lemma1_terms] with the true r, r', u), the gradient error
   ``eps_l = ||ḡ_l - ∇L_n(w̄^{l-1})||_2`` (ḡ read off the W slot after the update sublayer), and the
   trajectory error ``||w̄^l - w^l_GD||_2`` against [`icdl.nets.reference_gd`][icdl.nets.reference_gd];
3. the corrected Corollary 1.1 bound ``L_f^{-1} ((1 + eta L_f)^l - 1) eps``
   ([`icdl.theory.corollary11_bound`][icdl.theory_bounds.corollary11_bound]), at the measured
   ``eps = max_l eps_l`` and at the variant's **a-priori** step budget
   ([`icdl.construct.bounds.budget`][icdl.construct.bounds.budget]); ``L_f`` is a local estimate (largest
   ``|eigenvalue|`` of the Hessian of ``L_n`` by power iteration at the points of both trajectories: a lower
   bound on the true Lipschitz constant of ``∇L_n`` over W, piecewise for ReLU networks).

It also counts the example pre-activations inside the relu' window ``(0, delta)`` (the only place where a
ReLU construction may differ from GD), pre-activations outside the range ``[-R, R]`` of fitted sums (where
they are flat), and checks the query gate constant C against the loss units' arguments. The PASS conditions
(sublayers, ranges, budget) are those of [`VerifyReport`][icdl.construct.check.report.VerifyReport].
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from icdl.construct.bounds.budget import Declared, StepBudget, largest, step_budget
from icdl.construct.bounds.prediction import prediction_bound
from icdl.construct.build.contract import Reference
from icdl.construct.check.report import Divergence, StepErrors, VerifyReport, corollary_bound, max_or_nan
from icdl.construct.check.stream import Comparison, Prompt, SlotError, StreamCheck, recursion
from icdl.construct.compile import CompiledModel, TraceFn, TracePoint, default_tol
from icdl.construct.task import gd_is_degenerate
from icdl.construct.variants.registry import get_variant
from icdl.nets import (
    empirical_risk,
    forward,
    reference_gd,
)

__all__ = [
    "LIPSCHITZ_POINTS",
    "LIPSCHITZ_RTOL",
    "Checked",
    "Comparison",
    "Divergence",
    "Prompt",
    "Reference",
    "SlotError",
    "StepErrors",
    "Trace",
    "VerifyReport",
    "compare",
    "estimate_lipschitz",
    "lipschitz_method",
    "lipschitz_points",
    "recursion",
    "report",
    "trace",
    "verify",
]


# The L_f estimate's default cost: power iteration at up to this many points spread over both trajectories,
# the first with up to ``iters`` steps, each later one warm-started from the previous point's vector with up
# to ``iters // 4`` (the trajectories move little per step, so the top eigenvector does too). Every iterate's
# ||Hv|| (|v| = 1) is a lower bound on the largest |eigenvalue| and never decreases (H symmetric:
# ||Hv||^2 = <v, H^2 v> <= ||H^2 v||), so warm starts only converge faster, and a point's iteration stops
# once ||Hv|| grows by less than LIPSCHITZ_RTOL (relative) in one step. A point equal to one already visited
# (w0 starts both trajectories) is not visited again. At 10M parameters one Hessian-vector product costs
# about a tenth of the compiled forward.
LIPSCHITZ_POINTS = 8
LIPSCHITZ_RTOL = 1e-4


def lipschitz_points(count: int, max_points: int | None = LIPSCHITZ_POINTS) -> list[int]:
    """Indices of the points the L_f estimate visits among ``count``: all, or ``max_points`` evenly spread
    (the first and the last included)."""
    if max_points is None or count <= max_points:
        return list(range(count))
    return sorted({round(i * (count - 1) / (max_points - 1)) for i in range(max_points)})


def lipschitz_method(iters: int, count: int, max_points: int | None = LIPSCHITZ_POINTS) -> str:
    """How [`estimate_lipschitz`][icdl.construct.check.verify.estimate_lipschitz] estimated L_f, for the
    report."""
    used = len(lipschitz_points(count, max_points))
    where = (
        f"{count} trajectory points"
        if used == count
        else f"{used} of {count} trajectory points (evenly spread)"
    )
    how = (
        f"power iteration at {where}: up to {iters} steps at the first, up to {max(1, iters // 4)} "
        f"warm-started at each other, until ||Hv|| grows by < {LIPSCHITZ_RTOL:g}"
    )
    return f"max |Hessian eigenvalue| by {how} (local)"


def estimate_lipschitz(
    model: CompiledModel,
    points: list[Tensor],
    x: Tensor,
    y: Tensor,
    iters: int = 20,
    *,
    max_points: int | None = LIPSCHITZ_POINTS,
    rtol: float = LIPSCHITZ_RTOL,
) -> float:
    """Local estimate of the Lipschitz constant of ``∇L_n``: max over ``points`` of the largest |eigenvalue|
    of the Hessian of ``L_n`` (power iteration on autograd Hessian-vector products).

    At most ``max_points`` evenly spread points are visited (all with ``max_points=None``;
    [`lipschitz_points`][icdl.construct.check.verify.lipschitz_points]), a point equal to one already
    visited skipped: the first (and any after a non-finite Hessian-vector product) with up to ``iters``
    steps from a random start, each later one with up to ``max(1, iters // 4)`` steps warm-started from the
    previous vector; a point's iteration stops once
    ``||Hv||`` grows by less than ``rtol`` (relative) in a step (``rtol=0``: every step). The result is a
    lower bound on the largest |eigenvalue| at the points visited.
    """
    spec, loss = model.spec, model.config.loss
    best = 0.0
    g = torch.Generator().manual_seed(0)
    visit = lipschitz_points(len(points), max_points)
    seen: list[Tensor] = []
    v: Tensor | None = None
    for i in visit:
        if any(points[i] is s or torch.equal(points[i], s) for s in seen):
            continue
        seen.append(points[i])
        w = points[i].detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(empirical_risk(spec, loss, w, x, y), w, create_graph=True)
        steps = max(1, iters // 4)  # warm-started
        if v is None:  # the first point, or after a NaN Hessian: a fresh random start with every step
            v = torch.randn(w.shape, generator=g, dtype=w.dtype)
            v = v / v.norm()
            steps = iters
        lam = 0.0
        for _ in range(steps):
            # H v as the gradient of <grad, v> (a scalar: no grad_outputs, whose shape check imports torch.fx)
            (hv,) = torch.autograd.grad(grad @ v, w, retain_graph=True)
            nrm = float(hv.norm())
            if nrm == 0.0 or not math.isfinite(nrm):
                v = None  # a fresh start at the next point
                break
            v = hv / nrm
            grown = nrm - lam
            lam = nrm
            if grown <= rtol * nrm:
                break
        best = max(best, lam)
    return best


@dataclass
class Trace:
    """One run of the model on a prompt: the prompt ``H0``, the output, and the seconds spent in the forward
    pass and in the sublayer check (the states themselves are checked as they stream and not kept)."""

    H0: Tensor
    out: Tensor
    seconds_forward: float
    seconds_check: float = 0.0


def trace(model: CompiledModel, H0: Tensor, check: TraceFn | None = None) -> Trace:
    """Run ``model`` on ``H0`` (one prompt), calling ``check(point, H)`` after every sublayer; the time spent
    in ``check`` is not counted as forward time."""
    spent = [0.0]

    def timed(pt: TracePoint, H: Tensor) -> Tensor | None:
        t = time.perf_counter()
        new = check(pt, H) if check is not None else None
        spent[0] += time.perf_counter() - t
        return new

    t0 = time.perf_counter()
    # two state buffers in turn, and the sublayers that are additions at fixed places run in place: the
    # streaming check holds only the states before and after a sublayer (or what an in-place one wrote)
    out = model.run(H0, trace=timed, reuse=True, inplace=True)
    return Trace(H0, out, time.perf_counter() - t0 - spent[0], spent[0])


def compare(
    model: CompiledModel,
    H0: Tensor,
    prompt: Prompt,
    *,
    tol: float = 1e-9,
    on_step: Callable[[Reference], None] | None = None,
) -> tuple[Trace, Comparison]:
    """Run ``model`` on ``H0`` and check every sublayer's output as it comes against the variant's expected
    effects (everything not named must keep its value;
    [`StreamCheck`][icdl.construct.check.stream.StreamCheck]). The reference is re-evaluated at the
    transformer's own weights at the start of every step, so each sublayer is checked on its own input and the
    first divergence is where a bug is."""
    check = StreamCheck(model, H0, prompt, tol, on_step)
    tr = trace(model, H0, check)
    return tr, check.result()


@dataclass
class _Counters:
    window: int = 0
    range: int = 0
    step_range: int = 0
    gate_margin: float = math.inf
    # the variant's declared errors, and the a-priori budget of each step so far with the step-start weights
    # it is at (`_budget`)
    declared: Declared | None = None
    budgets: list[tuple[Tensor, StepBudget]] = field(default_factory=list)
    # the fitted sums' largest error on the arguments they actually saw over their declared sup error
    # (`_declared_check`), and which sum it was: (name, layer, measured, declared)
    sum_ratio: float = 0.0
    worst_sum: tuple[str, int, float, float] | None = None
    # likewise the variant's approximate products (`Variant.product_errors`): the worst, and the worst
    # measured/declared of each kind over all layers and steps
    product_ratio: float = 0.0
    worst_product: tuple[str, int, float, float] | None = None
    product_kinds: dict[str, float] = field(default_factory=dict)


def _count(
    model: CompiledModel, ref: Reference, c: _Counters, n: int, y_all: Tensor, *, stepping: bool = True
) -> None:
    """Pre-activations of the EXAMPLES inside the relu' window (0, delta) (the query's r' never reaches the
    gradient: its u is 0) and beyond the relu' step's float limit, pre-activations outside [-R, R] of the
    layers whose sums are fitted, and the loss units' margin below the gate constant C.
    ``stepping=False``: the readout's reference (the final weights), whose sublayers compute r only, so r'
    is not counted there."""
    cfg = model.config
    assert cfg.delta is not None
    step_limit = relu_step_limit(cfg.delta, model.config.torch_dtype)
    for j, z in enumerate(ref.sur.pre):
        if stepping and model.terms.r_prime[j].delta is not None:
            ze = z[:n]
            c.window += int(((ze > 0) & (ze < cfg.delta)).sum())
            c.step_range += int((z.abs() >= step_limit).sum())
        # only a layer whose own sums are fitted is flat outside [-R, R]: an exact layer (a linear output's
        # identity, the relu sums) is right at any argument, so its pre-activations are not counted
        if not (model.terms.r[j].exact and model.terms.r_prime[j].exact):
            c.range += int((z.abs() > cfg.radius).sum())
    own_ranges = get_variant(cfg.variant).ranges
    if own_ranges is not None:
        c.range += own_ranges(ref)
    u = model.terms.u
    for a, b in zip(u.a, u.b, strict=True):
        arg = float((a[0] * ref.sur.p[-1] + a[1] * y_all + b).abs().max())
        c.gate_margin = min(c.gate_margin, cfg.gate - arg)


def _declared_check(model: CompiledModel, ref: Reference, c: _Counters, tol: float) -> None:
    """Each fitted r and r' sum on the pre-activations it saw this step (the surrogate's ``z̄``, within its
    range ``[-R, R]``; outside it (b) counts them) against the true r, r': the measured error over the
    variant's declared sup error, which the a-priori budget assumes. A fit worse than declared (or a wrong
    knot where the arguments fall) shows here, however loose the budget. The variant's approximate products
    likewise, on the factors they multiplied
    ([`Variant.product_errors`][icdl.construct.build.contract.Variant])."""
    if c.declared is None:
        c.declared = get_variant(model.config.variant).budget(model)
    for j, z in enumerate(ref.sur.pre):
        act = model.spec.layer_act(j + 1)
        pairs = (
            ("r", model.terms.r[j], c.declared.r[j], act.fn),
            ("r'", model.terms.r_prime[j], c.declared.r_prime[j], act.deriv),
        )
        for name, terms, declared, true in pairs:
            if terms.exact:
                continue
            inside = z[z.abs() <= terms.radius]
            if inside.numel() == 0:
                continue
            exact = true(inside)
            err = float(((terms(inside) - exact).abs() - tol * exact.abs().clamp_min(1.0)).max())
            ratio = err / declared if declared > 0 else (math.inf if err > 0 else 0.0)
            if ratio > c.sum_ratio:
                c.sum_ratio, c.worst_sum = ratio, (name, j + 1, err, declared)
    measure = get_variant(model.config.variant).product_errors
    for kind, layer, err, declared in measure(ref, tol) if measure is not None else ():
        if err == -math.inf:  # no factor pair inside its box this step
            continue
        ratio = err / declared if declared > 0 else (math.inf if err > 0 else 0.0)
        c.product_kinds[kind] = max(c.product_kinds.get(kind, -math.inf), ratio)
        if c.worst_product is None or ratio > c.product_ratio:
            c.product_ratio, c.worst_product = ratio, (kind, layer, err, declared)


def relu_step_limit(delta: float, dtype: torch.dtype) -> float:
    """Where the relu' step ``relu(z/δ) - relu(z/δ - 1)`` stops being exactly 0 or 1 in ``dtype``: at
    ``|z/δ| >= 2 / eps_mach`` (2^24 in float32, 2^53 in float64) consecutive floats are 2 apart, so
    ``z/δ - 1`` rounds back and the step gives 0 or 2. With δ = 1e-5 in float32 that is ``|z| >= 168``."""
    return delta * 2.0 / torch.finfo(dtype).eps


def _budget(model: CompiledModel, ref: Reference, c: _Counters, prompt: Prompt, tol: float) -> None:
    """The a-priori budget of the step starting at ``ref.w``
    ([`step_budget`][icdl.construct.bounds.budget.step_budget]) from the exact Lemma 1 terms the sublayer
    check evaluated there (their examples' rows: the query's u and s are 0), for the first ``model.steps``
    references (the last one is the readout's, at the final weights)."""
    if len(c.budgets) >= model.steps:
        return
    cfg = model.config
    assert cfg.delta is not None
    if c.declared is None:
        c.declared = get_variant(cfg.variant).budget(model)
    ex = ref.exact.first_rows(prompt.n)
    x, y = prompt.x, prompt.y
    b = step_budget(
        model.spec, cfg.loss, c.declared, ref.w, x, y, lr=cfg.lr, tol=tol, delta=cfg.delta, terms=ex
    )
    c.budgets.append((ref.w, b))


def verify(
    model: CompiledModel,
    x: Tensor,
    y: Tensor,
    x_query: Tensor,
    w0: Tensor,
    *,
    tol: float | None = None,
    lipschitz_iters: int = 20,
) -> VerifyReport:
    """Run ``model`` on one prompt and compare it with reference GD:
    [`trace`][icdl.construct.check.verify.trace], [`compare`][icdl.construct.check.verify.compare],
    [`report`][icdl.construct.check.verify.report] (see the module docstring).

    Args:
        model: a compiled model.
        x: ``(n, d_x)`` inputs; y: ``(n, d_y)`` labels; x_query: ``(d_x,)``; w0: ``(P,)`` initial weights.
        tol: relative tolerance of the sublayer check (``|err| <= tol * max(1, |expected|)``); default
            [`default_tol`][icdl.construct.config.default_tol] of the model's dtype (1e-9 float64, 1e-4
            float32).
        lipschitz_iters: power-iteration steps per trajectory point for the L_f estimate (0: skip).
    """
    t_start = time.perf_counter()
    tol = default_tol(model.config.dtype) if tol is None else tol
    prompt = Prompt.of(model, x, y, x_query, w0)
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    counters = _Counters()
    y_all = prompt.y_all

    def on_step(ref: Reference) -> None:
        # the first `model.steps` references start GD steps; the last one is the readout's (r only)
        _count(model, ref, counters, prompt.n, y_all, stepping=len(counters.budgets) < model.steps)
        _budget(model, ref, counters, prompt, tol)
        _declared_check(model, ref, counters, tol)

    tr, cmp = compare(model, H0, prompt, tol=tol, on_step=on_step)
    return report(Checked(model, prompt, tr, cmp, counters, tol, t_start), lipschitz_iters=lipschitz_iters)


@dataclass
class Checked:
    """What [`report`][icdl.construct.check.verify.report] turns into a
    [`VerifyReport`][icdl.construct.check.report.VerifyReport]: the model, the prompt, its trace, the
    sublayer comparison, the range counters, the tolerance used and when the verification started."""

    model: CompiledModel
    prompt: Prompt
    trace: Trace
    comparison: Comparison
    counters: _Counters
    tol: float
    t_start: float


@dataclass
class _GDCheck:
    """Reference GD and the Corollary 1.1 ingredients: its trajectory, eps = max_l eps_l, the L_f estimate
    (``lf_estimated``: whether one was made), the a-priori step budgets."""

    traj_gd: Tensor
    traj_tf: Tensor
    seconds: float
    eps: float
    lf: float
    lf_estimated: bool
    declared: Declared
    budgets: list[StepBudget]

    def bound(self, eps: float, lr: float, steps: int) -> float:
        return corollary_bound(eps, lr, self.lf, steps)


def _gd_check(c: Checked, lipschitz_iters: int) -> _GDCheck:
    """Reference GD from the prompt's w0 (timed), the local L_f estimate along both trajectories, and the
    variant's a-priori budget of every step at its start weights
    ([`step_budget`][icdl.construct.bounds.budget.step_budget])."""
    model, p, cmp = c.model, c.prompt, c.comparison
    cfg, L = model.config, model.steps
    t0 = time.perf_counter()
    traj_gd = reference_gd(model.spec, cfg.loss, p.w0, p.x, p.y, lr=cfg.lr, steps=L, box=cfg.box)
    seconds = time.perf_counter() - t0
    estimated = lipschitz_iters > 0 and L > 0
    if estimated:
        lf = estimate_lipschitz(model, [*cmp.w_tf, *traj_gd], p.x, p.y, iters=lipschitz_iters)
    else:
        lf = 0.0
    declared = c.counters.declared
    if declared is None:
        declared = get_variant(cfg.variant).budget(model)
    assert cfg.delta is not None
    shared = c.counters.budgets  # computed as the check ran, from its exact terms at the same weights
    if len(shared) == L and all(w is v for (w, _), v in zip(shared, cmp.w_tf, strict=False)):
        budgets = [b for _, b in shared]
    else:
        budgets = [
            step_budget(model.spec, cfg.loss, declared, w, p.x, p.y, lr=cfg.lr, tol=c.tol, delta=cfg.delta)
            for w in cmp.w_tf[:L]
        ]
    eps = max_or_nan(cmp.grad_err)
    return _GDCheck(traj_gd, torch.stack(cmp.w_tf), seconds, eps, lf, estimated, declared, budgets)


def _step_errors(c: Checked, gd: _GDCheck) -> list[StepErrors]:
    """One [`StepErrors`][icdl.construct.check.report.StepErrors] per GD step: the exact-term errors,
    trajectory and gradient errors, the a-priori budget, and Corollary 1.1 at the measured errors and at the
    budgets of the steps so far."""
    out = []
    lr = c.model.config.lr
    for l in range(1, c.model.steps + 1):
        d = gd.traj_tf[l] - gd.traj_gd[l]
        e = c.comparison.per_step[l - 1]
        measured = max_or_nan(c.comparison.grad_err[:l])
        budget = max_or_nan([b.total for b in gd.budgets[:l]])
        out.append(
            StepErrors(
                l,
                e["p"],
                e["r_prime"],
                e["u"],
                e["s"],
                float(d.abs().max()),
                c.comparison.grad_err[l - 1],
                gd.budgets[l - 1].total,
                float(d.norm()),
                gd.bound(measured, lr, l),
                gd.bound(budget, lr, l),
                grad_norm=c.comparison.grad_norm[l - 1],
                applied_norm=c.comparison.applied_norm[l - 1],
                budget_approximation=gd.budgets[l - 1].approximation,
                budget_tolerance=gd.budgets[l - 1].tolerance,
                budget_roundoff=gd.budgets[l - 1].roundoff,
                weight_norm=float(gd.traj_gd[l].norm()),
                prediction_bound=prediction_bound(
                    c.model.spec, gd.traj_gd[l], c.prompt.x_query, gd.bound(budget, lr, l)
                ),
            )
        )
    return out


def report(c: Checked, *, lipschitz_iters: int = 20) -> VerifyReport:
    """Turn a [`Comparison`][icdl.construct.check.verify.Comparison] into a
    [`VerifyReport`][icdl.construct.check.report.VerifyReport]: trajectory against reference GD, the
    a-priori budgets and Corollary 1.1 (local L_f estimate), the prediction errors, degeneracy; the PASS
    conditions are the report's ``failures``."""
    model, cmp, L = c.model, c.comparison, c.model.steps
    gd = _gd_check(c, lipschitz_iters)
    traj_gd, traj_tf = gd.traj_gd, gd.traj_tf
    pred = model.read_prediction(c.trace.out)[0]
    pred_gd = forward_query(model, traj_gd[-1], c.prompt.x_query)
    pred_own = forward_query(model, traj_tf[-1], c.prompt.x_query)
    has_step = any(t.delta is not None for t in model.terms.r_prime)
    moved = float((traj_gd[-1] - traj_gd[0]).abs().max())
    cfg, p = model.config, c.prompt
    degenerate = gd_is_degenerate(model.spec, cfg.loss, p.x, p.y, p.w0, lr=cfg.lr, steps=L, box=cfg.box)
    variant = get_variant(model.config.variant)
    fitted = any(not t.exact for t in (*model.terms.r, *model.terms.r_prime, model.terms.u))
    u_out = sum(b.u_out_of_range for b in gd.budgets)
    budget = max_or_nan([b.total for b in gd.budgets])
    bound_l = gd.bound(budget, model.config.lr, L)
    return VerifyReport(
        steps=_step_errors(c, gd),
        first_divergence=cmp.first,
        tol=c.tol,
        max_sublayer_err=cmp.max_rel,
        max_abs_err_weights=float((traj_tf - traj_gd).abs().max()),
        max_abs_err_prediction=float((pred - pred_gd).abs().max()),
        max_abs_err_prediction_own_w=float((pred - pred_own).abs().max()),
        max_abs_err_f=float((pred_own - pred_gd).abs().max()),
        prediction_bound=prediction_bound(model.spec, traj_gd[-1], c.prompt.x_query, bound_l),
        weights_spread=cmp.spread,
        scratch_max=cmp.scratch_max,
        delta_window_count=c.counters.window if has_step else None,
        delta=model.config.delta if has_step else None,
        sum_error_ratio=c.counters.sum_ratio if c.counters.worst_sum is not None else None,
        worst_sum=c.counters.worst_sum,
        product_error_ratio=c.counters.product_ratio if c.counters.worst_product is not None else None,
        worst_product=c.counters.worst_product,
        step_range_count=c.counters.step_range if has_step else None,
        step_limit=relu_step_limit(model.config.delta or 0.0, model.config.torch_dtype) if has_step else None,
        out_of_range_count=c.counters.range + u_out if fitted or variant.ranges is not None else None,
        gate_margin=c.counters.gate_margin,
        eps_grad=gd.eps,
        grad_budget=budget,
        lipschitz_f=gd.lf,
        lipschitz_method=(
            lipschitz_method(lipschitz_iters, 2 * (L + 1)) if gd.lf_estimated else "not estimated"
        ),
        corollary_bound_measured=gd.bound(gd.eps, model.config.lr, L),
        corollary_bound_budget=bound_l,
        trajectory_error=float((traj_tf[-1] - traj_gd[-1]).norm()),
        seconds_forward=c.trace.seconds_forward,
        seconds_reference=gd.seconds,
        seconds_verify=time.perf_counter() - c.t_start,
        weights_moved=moved,
        degenerate=degenerate,
        window_hits_allowed=gd.declared.window_hits,
        trajectory_checked=gd.lf_estimated,
        dtype=str(cfg.dtype),
        range_auto=bool(cfg.auto_range),
        extra={
            "max_abs_weight": float(traj_gd.abs().max()),
            "max_abs_prediction": float(pred_gd.abs().max()),
            "budget_parts": largest(gd.budgets),
            "product_error_ratios": dict(c.counters.product_kinds),
        },
    )


def forward_query(model: CompiledModel, w: Tensor, x_query: Tensor) -> Tensor:
    """``f(w, x_query)`` with the exact network, shape ``(d_y,)``."""
    return forward(model.spec, w, x_query[None])[0]
