"""Verify a compiled GD transformer against reference gradient descent, sublayer by sublayer.

[`verify`][icdl.construct.verify.verify] is three steps with no knowledge of any role or variant:
[`trace`][icdl.construct.verify.trace] runs the model on one prompt and keeps the state after every sublayer
(named ``(step, sublayer name)``, step None for the readout); [`compare`][icdl.construct.verify.compare]
checks every state against what the variant's expected effects
([`icdl.construct.contract`][icdl.construct.contract]) say must be in each slot;
[`report`][icdl.construct.verify.report] adds the GD comparisons below. It compares

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
   ([`icdl.construct.budget`][icdl.construct.budget]); ``L_f`` is a local estimate (largest ``|eigenvalue|``
   of the Hessian of ``L_n`` by power iteration at the points of both trajectories: a lower bound on the true
   Lipschitz constant of ``∇L_n`` over W, piecewise for ReLU networks).

It also counts the example pre-activations inside the relu' window ``(0, delta)`` (the only place where a
ReLU construction may differ from GD), pre-activations outside the range ``[-R, R]`` of fitted sums (where
they are flat), and checks the query gate constant C against the loss units' arguments. The PASS conditions
(sublayers, ranges, budget) are those of [`VerifyReport`][icdl.construct.verify_report.VerifyReport].
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from icdl.construct.budget import Declared, StepBudget, largest, step_budget
from icdl.construct.compile import CompiledModel, TracePoint, default_tol
from icdl.construct.contract import Expect, Reference
from icdl.construct.variants import get_variant
from icdl.construct.verify_report import Divergence, StepErrors, VerifyReport, max_or_nan
from icdl.construct.verify_report import corollary_bound as _bound
from icdl.nets import (
    GradTerms,
    empirical_risk,
    forward,
    gradient,
    lemma1_terms,
    reference_gd,
)

__all__ = [
    "Checked",
    "Comparison",
    "Divergence",
    "Prompt",
    "Reference",
    "StepErrors",
    "Trace",
    "VerifyReport",
    "compare",
    "estimate_lipschitz",
    "recursion",
    "report",
    "trace",
    "verify",
]


def recursion(
    model: CompiledModel,
    w: Tensor,
    x_all: Tensor,
    y_all: Tensor,
    t: Tensor,
    *,
    surrogate: bool,
) -> GradTerms:
    """The GD-step terms for weights ``w`` (P,), tokens ``x_all`` (T, d_x), ``y_all`` (T, d_y), mask t (T,).

    [`icdl.nets.lemma1_terms`][icdl.nets.lemma1_terms] with the model's conditioned ReLU sums passed in as r,
    r', u (``surrogate=True``: what the heads compute, paper (C.6), (3.20)) or the exact ones (Lemma 1).
    Tokens with ``t = 0`` (the query) get u = 0 and add nothing to ``grad = (1/(2n)) sum_t s_t(j)
    p_t(j-1)^T``.
    """
    N = model.spec.depth
    if not surrogate:
        return lemma1_terms(model.spec, model.config.loss, w, x_all, y_all, mask=t)
    terms = model.terms
    return lemma1_terms(
        model.spec,
        model.config.loss,
        w,
        x_all,
        y_all,
        mask=t,
        r=[terms.r[j] for j in range(N)],
        r_prime=[terms.r_prime[j] for j in range(N)],
        u=terms.u,
    )


def estimate_lipschitz(
    model: CompiledModel, points: list[Tensor], x: Tensor, y: Tensor, iters: int = 20
) -> float:
    """Local estimate of the Lipschitz constant of ``∇L_n``: max over ``points`` of the largest |eigenvalue|
    of the Hessian of ``L_n`` (power iteration on autograd Hessian-vector products, ``iters`` steps each)."""
    spec, loss = model.spec, model.config.loss
    best = 0.0
    g = torch.Generator().manual_seed(0)
    for w in points:
        w = w.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(empirical_risk(spec, loss, w, x, y), w, create_graph=True)
        v = torch.randn(w.shape, generator=g, dtype=w.dtype)
        v = v / v.norm()
        lam = 0.0
        for _ in range(iters):
            (hv,) = torch.autograd.grad(grad, w, v, retain_graph=True)
            nrm = float(hv.norm())
            if nrm == 0.0 or not math.isfinite(nrm):
                break
            lam = nrm
            v = hv / nrm
        best = max(best, lam)
    return best


@dataclass
class Trace:
    """The prompt and the state after every sublayer (batch element 0), in application order."""

    H0: Tensor
    points: list[tuple[TracePoint, Tensor]]
    out: Tensor
    seconds_forward: float


def trace(model: CompiledModel, H0: Tensor) -> Trace:
    """Run ``model`` on ``H0`` (one prompt) and keep the state after every sublayer."""
    points: list[tuple[TracePoint, Tensor]] = []
    t0 = time.perf_counter()
    out = model.run(H0, trace=lambda pt, H: points.append((pt, H[0].clone())))
    return Trace(H0, points, out, time.perf_counter() - t0)


@dataclass
class SlotError:
    """Error of one slot after one sublayer: max ``|got - want| / max(1, |want|)``, its abs value, and
    whether the slot holds a NaN or an inf where the reference does not."""

    slot: str
    rel: float
    abs: float
    kind: str

    @property
    def rank(self) -> tuple[int, float]:
        """Order for "the worst slot": NaN and inf before any finite error."""
        return (0 if self.kind == "finite" else 1, self.rel if self.kind == "finite" else 0.0)


def _slot_error(label: str, got: Tensor, want: Tensor) -> SlotError:
    bad = ~torch.isfinite(got) & torch.isfinite(want)
    if bool(bad.any()):
        kind = "nan" if bool(torch.isnan(got[bad]).any()) else "inf"
        err = math.nan if kind == "nan" else math.inf
        return SlotError(label, err, err, kind)
    diff = (got - want).abs().nan_to_num(nan=0.0)  # NaN where both are NaN: no new divergence
    rel = diff / want.abs().nan_to_num(nan=1.0, posinf=1.0, neginf=1.0).clamp_min(1.0)
    return SlotError(label, float(rel.max()), float(diff.max()), "finite")


@dataclass(frozen=True)
class Prompt:
    """One prompt in the model's dtype: ``x`` (n, d_x), ``y`` (n, d_y), ``x_query`` (d_x,), ``w0`` (P,)."""

    x: Tensor
    y: Tensor
    x_query: Tensor
    w0: Tensor

    @classmethod
    def of(cls, model: CompiledModel, x: Tensor, y: Tensor, x_query: Tensor, w0: Tensor) -> Prompt:
        dt = model.config.torch_dtype
        return cls(x.to(dt), y.to(dt), x_query.to(dt), w0.to(dt))

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def x_all(self) -> Tensor:
        """The n examples' inputs, then the query's: ``(n + 1, d_x)``."""
        return torch.cat([self.x, self.x_query[None]])

    @property
    def y_all(self) -> Tensor:
        """The labels, then 0 for the query: ``(n + 1, d_y)``."""
        return torch.cat([self.y, torch.zeros(1, self.y.shape[1], dtype=self.y.dtype)])

    @property
    def mask(self) -> Tensor:
        """``t``: 1 on the examples, 0 on the query, ``(n + 1,)``."""
        return torch.cat([torch.ones(self.n, dtype=self.x.dtype), torch.zeros(1, dtype=self.x.dtype)])


@dataclass
class Comparison:
    """What [`compare`][icdl.construct.verify.compare] found: the first divergence, the largest relative
    sublayer error, per step the errors against exact GD terms and the gradient the transformer applied, and
    the step-end weights."""

    first: Divergence | None
    max_rel: float
    per_step: list[dict[str, float]]
    grad_err: list[float]
    w_tf: list[Tensor]
    spread: float
    scratch_max: float


# quantities whose slots are also compared with the exact Lemma 1 terms (the columns of StepErrors)
_EXACT = ("p", "r_prime", "u", "s")


class _Walk:
    """The state of [`compare`][icdl.construct.verify.compare] while it walks the trace: the current
    reference, the state before the sublayer, the weights at the start of the step, and what has been found so
    far."""

    def __init__(
        self,
        model: CompiledModel,
        tr: Trace,
        prompt: Prompt,
        tol: float,
        on_step: Callable[[Reference], None] | None,
    ) -> None:
        variant = get_variant(model.config.variant)
        self.model, self.prompt, self.tol, self.on_step = model, prompt, tol, on_step
        self.layout = model.layout
        self.slots = {s.label: s for s in self.layout.slots}
        self.T_all, a = tr.H0.shape[1], self.layout.prefix_tokens
        self.token_rows = {
            "all": slice(None),
            "query": slice(self.T_all - 1, None),
            "data": slice(a, None),
            "prefix": slice(0, a),
        }
        self.effects = {m.info.name: variant.effects(m.info, self.layout) for m in model.block_layers}
        self.readout_effects = {
            m.info.name: variant.effects(m.info, self.layout) for m in model.readout_layers
        }
        self.x_all, self.y_all, self.tmask = prompt.x_all, prompt.y_all, prompt.mask
        self.first: Divergence | None = None
        self.max_rel = self.spread = self.scratch_max = 0.0
        self.cur = tr.H0[0].clone()
        self.step_w = prompt.w0
        self.ref = self.reference(prompt.w0)
        self.w_tf = [prompt.w0]
        self.grad_err: list[float] = []
        self.per_step: list[dict[str, float]] = []
        self.acc = self.fresh()
        self.applied: Tensor | None = None
        self.last = len(model.block_layers) - 1

    @staticmethod
    def fresh() -> dict[str, float]:
        """Per step, max error against the exact Lemma 1 terms; NaN until some Expect names the quantity."""
        return dict.fromkeys(_EXACT, math.nan)

    def reference(self, w: Tensor) -> Reference:
        """The reference of the GD step that starts at the transformer's own weights ``w``."""
        m, cfg = self.model, self.model.config
        sur = recursion(m, w, self.x_all, self.y_all, self.tmask, surrogate=True)
        exact = recursion(m, w, self.x_all, self.y_all, self.tmask, surrogate=False)
        ref = Reference(w, sur, exact, cfg.lr, cfg.box, m, self.x_all, self.y_all, self.tmask)
        if self.on_step is not None:
            self.on_step(ref)
        return ref

    def place(self, e: Expect, val: Tensor) -> Tensor:
        """The expected value on the tokens ``e.tokens`` selects: ``val`` has a row per token of the prompt,
        per data token (built-in quantities) or per selected token."""
        if val.dim() == 1:
            return val
        rows = self.token_rows[e.tokens]
        if val.shape[0] == self.T_all:
            return val[rows]
        if val.shape[0] == self.prompt.n + 1 and e.tokens in ("data", "query"):
            return val if e.tokens == "data" else val[-1:]
        if val.shape[0] == len(range(self.T_all)[rows]):
            return val
        raise ValueError(f"expected value for slot {e.slot} has {val.shape[0]} rows ({e.tokens} tokens)")

    def expected(self, pt: TracePoint, H: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The state the sublayer at ``pt`` must produce from ``self.cur`` and the per-slot tolerances its
        effects set; records the errors against the exact terms and the weights written before projection."""
        expects = (self.readout_effects if pt.step is None else self.effects)[pt.name]
        exp = self.cur.clone()
        tols: dict[str, float] = {}
        dt = self.model.config.torch_dtype
        for e in expects:
            idx = list(self.slots[e.slot].indices)
            rows = self.token_rows[e.tokens]
            val = torch.zeros(len(idx), dtype=dt) if e.quantity == "zero" else self.ref.value(e)
            exp[rows, idx] = self.place(e, val)
            if e.rtol is not None:
                tols[e.slot] = e.rtol
            if isinstance(e.quantity, str) and e.quantity in _EXACT and pt.step is not None:
                want = self.place(e, self.ref.value(e, self.ref.exact))
                err = float((H[rows][:, idx] - want).abs().max())
                old = self.acc[e.quantity]
                self.acc[e.quantity] = err if math.isnan(old) else max(old, err)
            if e.applied_step or e.quantity == "w_step":
                self.applied = self.layout.read_weights(H)
        return exp, tols

    def check(self, pt: TracePoint, H: Tensor, exp: Tensor, tols: dict[str, float]) -> None:
        """Compare every slot of ``H`` with ``exp``; the first failing sublayer is the divergence."""
        errs = [
            _slot_error(s.label, H[:, list(s.indices)], exp[:, list(s.indices)]) for s in self.layout.slots
        ]
        for se in errs:
            if se.kind == "finite":
                self.max_rel = max(self.max_rel, se.rel)
        failing = [se for se in errs if not se.rel <= tols.get(se.slot, self.tol)]
        if self.first is None and failing:
            bad = max(failing, key=lambda se: se.rank)
            self.first = Divergence(pt.step, pt.index, pt.name, pt.info.role, bad.slot, bad.abs, bad.kind)

    def end_step(self, H: Tensor) -> None:
        """After the block's last sublayer: weight replication, scratch, the applied gradient, new w."""
        layout, p = self.layout, self.prompt
        W = layout.weight_copies(H)
        self.spread = max(self.spread, float((W - W[0]).abs().max()))
        self.scratch_max = max(self.scratch_max, float(H[:, layout.scratch_indices()].abs().max()))
        # The gradient the transformer applied: read before the projection when a sublayer is expected
        # to write w - eta grad, else from the step's end (exact without projection).
        w_new = layout.read_weights(H).clone()
        g_tf = (self.step_w - (self.applied if self.applied is not None else w_new)) / self.model.config.lr
        true = gradient(self.model.spec, self.model.config.loss, self.step_w, p.x, p.y)
        self.grad_err.append(float((g_tf - true).norm()))
        self.applied = None
        self.step_w = w_new
        self.w_tf.append(w_new)
        self.per_step.append(self.acc)
        self.acc = self.fresh()


def compare(
    model: CompiledModel,
    tr: Trace,
    prompt: Prompt,
    *,
    tol: float = 1e-9,
    on_step: Callable[[Reference], None] | None = None,
) -> Comparison:
    """Check every traced state against the variant's expected effects (everything not named must keep its
    value); the reference is re-evaluated at the transformer's own weights at the start of every step, so
    each sublayer is checked on its own input and the first divergence is where a bug is."""
    walk = _Walk(model, tr, prompt, tol, on_step)
    for pt, H in tr.points:
        if pt.index == 0 and pt.step != 0 and not (pt.step is None and model.steps == 0):
            walk.ref = walk.reference(walk.step_w)
        exp, tols = walk.expected(pt, H)
        walk.check(pt, H, exp, tols)
        walk.cur = H  # continue from the transformer's own state: later checks localise their own errors
        if pt.step is not None and pt.index == walk.last:
            walk.end_step(H)
    return Comparison(
        walk.first, walk.max_rel, walk.per_step, walk.grad_err, walk.w_tf, walk.spread, walk.scratch_max
    )


@dataclass
class _Counters:
    window: int = 0
    range: int = 0
    gate_margin: float = math.inf


def _count(model: CompiledModel, ref: Reference, c: _Counters, n: int, y_all: Tensor) -> None:
    """Pre-activations of the EXAMPLES inside the relu' window (0, delta) (the query's r' never reaches the
    gradient: its u is 0), pre-activations outside [-R, R] for fitted sums, and the loss units' margin
    below the gate constant C."""
    cfg = model.config
    assert cfg.delta is not None
    fitted = any(not t.exact for t in (*model.terms.r, *model.terms.r_prime))
    for j, z in enumerate(ref.sur.pre):
        if model.terms.r_prime[j].delta is not None:
            ze = z[:n]
            c.window += int(((ze > 0) & (ze < cfg.delta)).sum())
        if fitted:
            c.range += int((z.abs() > cfg.radius).sum())
    own_ranges = get_variant(cfg.variant).ranges
    if own_ranges is not None:
        c.range += own_ranges(ref)
    u = model.terms.u
    for a, b in zip(u.a, u.b, strict=True):
        arg = float((a[0] * ref.sur.p[-1] + a[1] * y_all + b).abs().max())
        c.gate_margin = min(c.gate_margin, cfg.gate - arg)


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
    """Run ``model`` on one prompt and compare it with reference GD: [`trace`][icdl.construct.verify.trace],
    [`compare`][icdl.construct.verify.compare], [`report`][icdl.construct.verify.report] (see the module
    docstring).

    Args:
        model: a compiled model.
        x: ``(n, d_x)`` inputs; y: ``(n, d_y)`` labels; x_query: ``(d_x,)``; w0: ``(P,)`` initial weights.
        tol: relative tolerance of the sublayer check (``|err| <= tol * max(1, |expected|)``); default
            [`default_tol`][icdl.construct.compile.default_tol] of the model's dtype (1e-9 float64, 1e-4
            float32).
        lipschitz_iters: power-iteration steps per trajectory point for the L_f estimate (0: skip).
    """
    t_start = time.perf_counter()
    tol = default_tol(model.config.dtype) if tol is None else tol
    prompt = Prompt.of(model, x, y, x_query, w0)
    tr = trace(model, model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0))
    counters = _Counters()
    y_all = prompt.y_all
    cmp = compare(
        model, tr, prompt, tol=tol, on_step=lambda ref: _count(model, ref, counters, prompt.n, y_all)
    )
    return report(Checked(model, prompt, tr, cmp, counters, tol, t_start), lipschitz_iters=lipschitz_iters)


@dataclass
class Checked:
    """What [`report`][icdl.construct.verify.report] turns into a
    [`VerifyReport`][icdl.construct.verify_report.VerifyReport]: the model, the prompt, its trace, the
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
        return _bound(eps, lr, self.lf, steps)


def _gd_check(c: Checked, lipschitz_iters: int) -> _GDCheck:
    """Reference GD from the prompt's w0 (timed), the local L_f estimate along both trajectories, and the
    variant's a-priori budget of every step at its start weights
    ([`step_budget`][icdl.construct.budget.step_budget])."""
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
    declared = get_variant(cfg.variant).budget(model)
    assert cfg.delta is not None
    budgets = [
        step_budget(model.spec, cfg.loss, declared, w, p.x, p.y, lr=cfg.lr, tol=c.tol, delta=cfg.delta)
        for w in cmp.w_tf[:L]
    ]
    eps = max_or_nan(cmp.grad_err)
    return _GDCheck(traj_gd, torch.stack(cmp.w_tf), seconds, eps, lf, estimated, declared, budgets)


def _step_errors(c: Checked, gd: _GDCheck) -> list[StepErrors]:
    """One [`StepErrors`][icdl.construct.verify_report.StepErrors] per GD step: the exact-term errors,
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
            )
        )
    return out


def report(c: Checked, *, lipschitz_iters: int = 20) -> VerifyReport:
    """Turn a [`Comparison`][icdl.construct.verify.Comparison] into a
    [`VerifyReport`][icdl.construct.verify_report.VerifyReport]: trajectory against reference GD, the
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
    variant = get_variant(model.config.variant)
    fitted = any(not t.exact for t in (*model.terms.r, *model.terms.r_prime, model.terms.u))
    u_out = sum(b.u_out_of_range for b in gd.budgets)
    budget = max_or_nan([b.total for b in gd.budgets])
    return VerifyReport(
        steps=_step_errors(c, gd),
        first_divergence=cmp.first,
        tol=c.tol,
        max_sublayer_err=cmp.max_rel,
        max_abs_err_weights=float((traj_tf - traj_gd).abs().max()),
        max_abs_err_prediction=float((pred - pred_gd).abs().max()),
        max_abs_err_prediction_own_w=float((pred - pred_own).abs().max()),
        weights_spread=cmp.spread,
        scratch_max=cmp.scratch_max,
        delta_window_count=c.counters.window if has_step else None,
        out_of_range_count=c.counters.range + u_out if fitted or variant.ranges is not None else None,
        gate_margin=c.counters.gate_margin,
        eps_grad=gd.eps,
        grad_budget=budget,
        lipschitz_f=gd.lf,
        lipschitz_method=(
            f"max |Hessian eigenvalue| by {lipschitz_iters}-step power iteration "
            f"at {2 * (L + 1)} trajectory points (local)"
            if gd.lf_estimated
            else "not estimated"
        ),
        corollary_bound_measured=gd.bound(gd.eps, model.config.lr, L),
        corollary_bound_budget=gd.bound(budget, model.config.lr, L),
        trajectory_error=float((traj_tf[-1] - traj_gd[-1]).norm()),
        seconds_forward=c.trace.seconds_forward,
        seconds_reference=gd.seconds,
        seconds_verify=time.perf_counter() - c.t_start,
        weights_moved=moved,
        degenerate=L > 0 and moved == 0.0,
        window_hits_allowed=gd.declared.window_hits,
        trajectory_checked=gd.lf_estimated,
        extra={
            "max_abs_weight": float(traj_gd.abs().max()),
            "max_abs_prediction": float(pred_gd.abs().max()),
            "budget_parts": largest(gd.budgets),
        },
    )


def forward_query(model: CompiledModel, w: Tensor, x_query: Tensor) -> Tensor:
    """``f(w, x_query)`` with the exact network, shape ``(d_y,)``."""
    return forward(model.spec, w, x_query[None])[0]
