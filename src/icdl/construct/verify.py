"""Verify a compiled GD transformer against reference gradient descent, sublayer by sublayer.

:func:`verify` is three steps with no knowledge of any role or variant: :func:`trace` runs the model on one
prompt and keeps the state after every sublayer (named ``(step, sublayer name)``, step None for the
readout); :func:`compare` checks every state against what the variant's expected effects
(:mod:`icdl.construct.contract`) say must be in each slot; :func:`report` adds the GD comparisons below.
It compares

1. **the whole token state after every sublayer** with what the construction must produce — the
   *surrogate* recursion: the paper's p̄, r̄', ḡ, s̄ (Lemmas 2-5, eq. (C.6), (3.20)) evaluated directly with
   the same conditioned ReLU sums the heads use, at the transformer's own current w. Any disagreement beyond
   ``tol * max(1, |expected|)`` is a construction bug (or a rounding problem); the FIRST such sublayer is
   reported (step, sublayer name, slot; NaN and inf are divergences and reported as such). For ReLU networks
   the surrogate *is* exact GD (outside the relu' window), so the same check also proves agreement with GD;
2. per step, the errors of p, r', u, s against the **exact** Lemma 1 terms at the transformer's w
   (:func:`icdl.nets.lemma1_terms` with the true r, r', u), the gradient error
   ``eps_l = ||ḡ_l - ∇L_n(w̄^{l-1})||_2`` (ḡ read off the W slot after the update sublayer), and the
   trajectory error ``||w̄^l - w^l_GD||_2`` against :func:`icdl.nets.reference_gd`;
3. the corrected Corollary 1.1 bound ``L_f^{-1} ((1 + eta L_f)^l - 1) eps``
   (:func:`icdl.theory.corollary11_bound`)
   with ``eps = max_l eps_l`` and ``L_f`` a **local estimate**: the largest ``|eigenvalue|`` of the Hessian
   of ``L_n`` found by power iteration on Hessian-vector products (autograd) at every point of both
   trajectories. It is a lower bound on the true Lipschitz constant of ``∇L_n`` over W (and for ReLU networks
   the Hessian is only piecewise defined), so the comparison is a sanity check, not a proof.

It also counts the example pre-activations inside the relu' window ``(0, delta)`` (the only place where a
ReLU construction may differ from GD), pre-activations outside the range ``[-R, R]`` of fitted sums (where
they are flat), and checks the query gate constant C against the loss units' arguments.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from icdl.construct.compile import CompiledModel, TracePoint
from icdl.construct.contract import Expect, Reference
from icdl.construct.variants import get_variant
from icdl.nets import (
    GradTerms,
    empirical_risk,
    forward,
    gradient,
    lemma1_terms,
    reference_gd,
)
from icdl.theory import corollary11_bound

__all__ = [
    "Divergence",
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

    :func:`icdl.nets.lemma1_terms` with the model's conditioned ReLU sums passed in as r, r', u
    (``surrogate=True``: what the heads compute, paper (C.6), (3.20)) or the exact ones (Lemma 1). Tokens
    with ``t = 0`` (the query) get u = 0 and add nothing to ``grad = (1/(2n)) sum_t s_t(j) p_t(j-1)^T``.
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
class StepErrors:
    """Errors of one GD step l (1-based), max abs over tokens and coordinates unless said otherwise; p,
    r_prime, g (= u) and s are NaN when no expected effect of the variant names that quantity."""

    step: int
    p: float
    r_prime: float
    g: float
    s: float
    w: float  # max |w̄^l - w^l_GD| (trajectory)
    grad_l2: float  # eps_l = ||ḡ_l - ∇L_n(w̄^{l-1})||_2
    trajectory_l2: float  # ||w̄^l - w^l_GD||_2
    bound_l2: float  # corrected Corollary 1.1 bound at step l


@dataclass
class Divergence:
    """The first sublayer whose output differs from its expected effect by more than the tolerance.

    Attributes:
        step: 0-based GD step, None for the readout.
        index: 0-based position in the block (or the readout).
        name: the sublayer's name (unique in its block).
        role: its role.
        slot: the slot with the largest error (a slot holding NaN or inf wins over any finite error).
        error: the largest absolute error in that slot (nan or inf when the slot is not finite).
        kind: ``"finite"``, ``"nan"`` or ``"inf"``.
    """

    step: int | None
    index: int
    name: str
    role: str
    slot: str
    error: float
    kind: str = "finite"

    def describe(self) -> str:
        where = "readout" if self.step is None else f"step {self.step + 1}"
        err = {"nan": "NaN", "inf": "inf"}.get(self.kind, f"|err| = {self.error:.3g}")
        return f"{where}, sublayer {self.index + 1} ({self.name}), slot {self.slot}: {err}"


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


@dataclass
class Comparison:
    """What :func:`compare` found: the first divergence, the largest relative sublayer error, per step the
    errors against exact GD terms and the gradient the transformer applied, and the step-end weights."""

    first: Divergence | None
    max_rel: float
    per_step: list[dict[str, float]]
    grad_err: list[float]
    w_tf: list[Tensor]
    spread: float
    scratch_max: float
    references: list[Reference]


_EXACT_KEYS = {"p": "p", "r_prime": "r_prime", "u": "g", "s": "s"}


def compare(
    model: CompiledModel,
    tr: Trace,
    x: Tensor,
    y: Tensor,
    x_query: Tensor,
    w0: Tensor,
    *,
    tol: float = 1e-9,
    on_step: Callable[[Reference], None] | None = None,
) -> Comparison:
    """Check every traced state against the variant's expected effects (everything not named must keep its
    value); the reference is re-evaluated at the transformer's own weights at the start of every step, so
    each sublayer is checked on its own input and the first divergence is where a bug is."""
    variant = get_variant(model.config.variant)
    layout, spec = model.layout, model.spec
    dt = model.config.torch_dtype
    n = x.shape[0]
    x_all = torch.cat([x, x_query[None]])
    y_all = torch.cat([y, torch.zeros(1, spec.out_dim, dtype=dt)])
    tmask = torch.cat([torch.ones(n, dtype=dt), torch.zeros(1, dtype=dt)])
    lr, box, loss = model.config.lr, model.config.box, model.config.loss
    slots = {s.label: s for s in layout.slots}
    scratch_idx = layout.scratch_indices()
    T_all, a = tr.H0.shape[1], layout.prefix_tokens
    token_rows = {
        "all": slice(None),
        "query": slice(T_all - 1, None),
        "data": slice(a, None),
        "prefix": slice(0, a),
    }

    def place(e: Expect, val: Tensor) -> Tensor:
        """The expected value on the tokens ``e.tokens`` selects: ``val`` has a row per token of the prompt,
        per data token (built-in quantities) or per selected token."""
        if val.dim() == 1:
            return val
        rows = token_rows[e.tokens]
        if val.shape[0] == T_all:
            return val[rows]
        if val.shape[0] == n + 1 and e.tokens in ("data", "query"):
            return val if e.tokens == "data" else val[-1:]
        if val.shape[0] == len(range(T_all)[rows]):
            return val
        raise ValueError(f"expected value for slot {e.slot} has {val.shape[0]} rows ({e.tokens} tokens)")

    effects_of = {m.info.name: variant.effects(m.info, layout) for m in model.block_layers}
    readout_effects = {m.info.name: variant.effects(m.info, layout) for m in model.readout_layers}

    def reference(w: Tensor) -> Reference:
        ref = Reference(
            w,
            recursion(model, w, x_all, y_all, tmask, surrogate=True),
            recursion(model, w, x_all, y_all, tmask, surrogate=False),
            lr,
            box,
            model,
            x_all,
            y_all,
            tmask,
        )
        if on_step is not None:
            on_step(ref)
        return ref

    first: Divergence | None = None
    max_rel = 0.0
    cur = tr.H0[0].clone()
    step_w = w0
    ref = reference(w0)
    refs = [ref]
    w_tf = [w0]
    grad_err: list[float] = []
    per_step: list[dict[str, float]] = []
    # per step, max error against the exact Lemma 1 terms; NaN until some Expect names the quantity
    acc: dict[str, float] = dict.fromkeys(_EXACT_KEYS.values(), math.nan)
    applied: Tensor | None = None
    spread = scratch_max = 0.0
    last = len(model.block_layers) - 1
    for pt, H in tr.points:
        if pt.index == 0 and pt.step != 0 and not (pt.step is None and model.steps == 0):
            ref = reference(step_w)
            refs.append(ref)
        expects = (readout_effects if pt.step is None else effects_of)[pt.name]
        exp = cur.clone()
        tols: dict[str, float] = {}
        for e in expects:
            idx = list(slots[e.slot].indices)
            rows = token_rows[e.tokens]
            val = torch.zeros(len(idx), dtype=dt) if e.quantity == "zero" else ref.value(e)
            exp[rows, idx] = place(e, val)
            if e.rtol is not None:
                tols[e.slot] = e.rtol
            if isinstance(e.quantity, str) and e.quantity in _EXACT_KEYS and pt.step is not None:
                key = _EXACT_KEYS[e.quantity]
                want = place(e, ref.value(e, ref.exact))
                err = float((H[rows][:, idx] - want).abs().max())
                acc[key] = err if math.isnan(acc[key]) else max(acc[key], err)
            if e.applied_step or e.quantity == "w_step":
                applied = layout.read_weights(H)
        errs = [_slot_error(s.label, H[:, list(s.indices)], exp[:, list(s.indices)]) for s in layout.slots]
        for se in errs:
            if se.kind == "finite":
                max_rel = max(max_rel, se.rel)
        failing = [se for se in errs if not se.rel <= tols.get(se.slot, tol)]
        if first is None and failing:
            bad = max(failing, key=lambda se: se.rank)
            first = Divergence(pt.step, pt.index, pt.name, pt.info.role, bad.slot, bad.abs, bad.kind)
        cur = H  # continue from the transformer's own state: later checks localise their own errors
        if pt.step is not None and pt.index == last:
            W = layout.weight_copies(H)
            spread = max(spread, float((W - W[0]).abs().max()))
            scratch_max = max(scratch_max, float(H[:, scratch_idx].abs().max()))
            # The gradient the transformer applied: read before the projection when a sublayer is expected
            # to write w - eta grad, else from the step's end (exact without projection).
            w_new = layout.read_weights(H).clone()
            g_tf = (step_w - (applied if applied is not None else w_new)) / lr
            grad_err.append(float((g_tf - gradient(spec, loss, step_w, x, y)).norm()))
            applied = None
            step_w = w_new
            w_tf.append(step_w)
            per_step.append(acc)
            acc = dict.fromkeys(_EXACT_KEYS.values(), math.nan)
    return Comparison(first, max_rel, per_step, grad_err, w_tf, spread, scratch_max, refs)


@dataclass
class VerifyReport:
    """Result of :func:`verify`. ``verdict`` is ``"FAIL"`` when some sublayer diverges from its expected
    effect beyond ``tol``, else ``"DEGENERATE"`` when reference GD never moves w (``weights_moved`` =
    ``max |w_L - w_0|`` is 0 with L >= 1 steps: every comparison with GD is then trivially exact, so the
    check proves nothing), else ``"PASS"``. ``passed`` means ``verdict == "PASS"``."""

    steps: list[StepErrors]
    first_divergence: Divergence | None
    tol: float
    max_sublayer_err: float
    max_abs_err_weights: float
    max_abs_err_prediction: float
    max_abs_err_prediction_own_w: float
    weights_spread: float
    scratch_max: float
    delta_window_count: int | None
    out_of_range_count: int | None
    gate_margin: float
    eps_grad: float
    lipschitz_f: float
    lipschitz_method: str
    corollary_bound: float
    trajectory_error: float
    seconds_forward: float
    seconds_reference: float
    seconds_verify: float
    weights_moved: float = math.nan
    degenerate: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """``"PASS"``, ``"FAIL"`` or ``"DEGENERATE"`` (see the class docstring)."""
        if self.first_divergence is not None:
            return "FAIL"
        return "DEGENERATE" if self.degenerate else "PASS"

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        d["verdict"] = self.verdict
        d["first_divergence"] = None if self.first_divergence is None else self.first_divergence.describe()
        d["first_divergence_at"] = None if self.first_divergence is None else asdict(self.first_divergence)
        return d

    def table(self) -> str:
        """A readable per-step table, its legend and the summary lines ("—" where a check does not apply)."""
        cols = ("p", "r_prime", "u", "s", "w", "eps_l", "traj_l2", "bound")
        head = f"{'step':>4} " + " ".join(f"{c:>9}" for c in cols)
        rows = [head]

        def num(v: float) -> str:
            return f"{'—':>9}" if math.isnan(v) else f"{v:9.2e}"

        for e in self.steps:
            vals = (e.p, e.r_prime, e.g, e.s, e.w, e.grad_l2, e.trajectory_l2, e.bound_l2)
            rows.append(f"{e.step:>4} " + " ".join(num(v) for v in vals))
        rows += [
            "legend: p, r_prime, u, s = max |slot - exact Lemma 1 term| at the transformer's w "
            "(— = not a slot of this variant); w = max |w_TF - w_GD|;",
            "        eps_l = ||applied gradient - grad L_n||_2; traj_l2 = ||w_TF - w_GD||_2; "
            "bound = Corollary 1.1 (corrected) at step l",
        ]
        div = "none" if self.first_divergence is None else self.first_divergence.describe()

        def opt(v: int | None) -> str:
            return "—" if v is None else str(v)

        rows += [
            f"sublayer check (tol {self.tol:.0e}): max err {self.max_sublayer_err:.2e}; "
            f"first divergence: {div}",
            f"max |w_TF - w_GD| = {self.max_abs_err_weights:.2e}; "
            f"prediction error = {self.max_abs_err_prediction:.2e}",
            f"w spread across tokens = {self.weights_spread:.1e}; "
            f"scratch after blocks = {self.scratch_max:.1e}",
            f"relu' window (0, delta) hits = {opt(self.delta_window_count)}; "
            f"outside [-R, R] = {opt(self.out_of_range_count)}; "
            f"gate margin = {self.gate_margin:.3g}",
            f"eps = {self.eps_grad:.2e}; L_f ~ {self.lipschitz_f:.3g} ({self.lipschitz_method}); "
            f"Corollary 1.1 bound {self.corollary_bound:.2e} vs trajectory error {self.trajectory_error:.2e}",
            f"GD moves w by max |w_L - w_0| = {self.weights_moved:.2e}"
            + ("; DEGENERATE task: GD never moves w, so the check proves nothing" if self.degenerate else ""),
        ]
        return "\n".join(rows)


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
    tol: float = 1e-9,
    lipschitz_iters: int = 20,
) -> VerifyReport:
    """Run ``model`` on one prompt and compare it with reference GD: :func:`trace`, :func:`compare`,
    :func:`report` (see the module docstring).

    Args:
        model: a compiled model.
        x: ``(n, d_x)`` inputs; y: ``(n, d_y)`` labels; x_query: ``(d_x,)``; w0: ``(P,)`` initial weights.
        tol: relative tolerance of the sublayer check (``|err| <= tol * max(1, |expected|)``).
        lipschitz_iters: power-iteration steps per trajectory point for the L_f estimate (0: skip).
    """
    t_start = time.perf_counter()
    dt = model.config.torch_dtype
    x, y, x_query, w0 = (v.to(dt) for v in (x, y, x_query, w0))
    tr = trace(model, model.build_prompt(x, y, x_query, w0))
    y_all = torch.cat([y, torch.zeros(1, model.spec.out_dim, dtype=dt)])
    counters = _Counters()
    cmp = compare(
        model,
        tr,
        x,
        y,
        x_query,
        w0,
        tol=tol,
        on_step=lambda ref: _count(model, ref, counters, x.shape[0], y_all),
    )
    return report(model, tr, cmp, counters, x, y, x_query, w0, tol, lipschitz_iters, t_start)


def report(
    model: CompiledModel,
    tr: Trace,
    cmp: Comparison,
    counters: _Counters,
    x: Tensor,
    y: Tensor,
    x_query: Tensor,
    w0: Tensor,
    tol: float,
    lipschitz_iters: int,
    t_start: float,
) -> VerifyReport:
    """Turn a :class:`Comparison` into a :class:`VerifyReport`: trajectory against reference GD,
    the Corollary 1.1 bound with a local L_f estimate, the prediction errors."""
    spec, L = model.spec, model.steps
    lr, box, loss = model.config.lr, model.config.box, model.config.loss
    t0 = time.perf_counter()
    traj_gd = reference_gd(spec, loss, w0, x, y, lr=lr, steps=L, box=box)
    seconds_reference = time.perf_counter() - t0
    traj_tf = torch.stack(cmp.w_tf)
    eps = _max_or_nan(cmp.grad_err)
    if lipschitz_iters > 0 and L > 0:
        lf = estimate_lipschitz(model, [*cmp.w_tf, *traj_gd], x, y, iters=lipschitz_iters)
    else:
        lf = 0.0

    def bound(l: int) -> float:
        return _bound(eps, lr, lf, l)

    steps_out = []
    for l in range(1, L + 1):
        d = traj_tf[l] - traj_gd[l]
        e = cmp.per_step[l - 1]
        steps_out.append(
            StepErrors(
                l,
                e["p"],
                e["r_prime"],
                e["g"],
                e["s"],
                float(d.abs().max()),
                cmp.grad_err[l - 1],
                float(d.norm()),
                bound(l),
            )
        )
    pred = model.read_prediction(tr.out)[0]
    pred_gd = forward_query(model, traj_gd[-1], x_query)
    pred_own = forward_query(model, traj_tf[-1], x_query)
    has_step = any(t.delta is not None for t in model.terms.r_prime)
    moved = float((traj_gd[-1] - traj_gd[0]).abs().max())
    fitted = any(not t.exact for t in (*model.terms.r, *model.terms.r_prime))
    return VerifyReport(
        steps=steps_out,
        first_divergence=cmp.first,
        tol=tol,
        max_sublayer_err=cmp.max_rel,
        max_abs_err_weights=float((traj_tf - traj_gd).abs().max()),
        max_abs_err_prediction=float((pred - pred_gd).abs().max()),
        max_abs_err_prediction_own_w=float((pred - pred_own).abs().max()),
        weights_spread=cmp.spread,
        scratch_max=cmp.scratch_max,
        delta_window_count=counters.window if has_step else None,
        out_of_range_count=(
            counters.range if fitted or get_variant(model.config.variant).ranges is not None else None
        ),
        gate_margin=counters.gate_margin,
        eps_grad=eps,
        lipschitz_f=lf,
        lipschitz_method=(
            f"max |Hessian eigenvalue| by {lipschitz_iters}-step power iteration "
            f"at {2 * (L + 1)} trajectory points (local)"
        ),
        corollary_bound=bound(L),
        trajectory_error=float((traj_tf[-1] - traj_gd[-1]).norm()),
        seconds_forward=tr.seconds_forward,
        seconds_reference=seconds_reference,
        seconds_verify=time.perf_counter() - t_start,
        weights_moved=moved,
        degenerate=L > 0 and moved == 0.0,
        extra={
            "max_abs_weight": float(traj_gd.abs().max()),
            "max_abs_prediction": float(pred_gd.abs().max()),
        },
    )


def _max_or_nan(values: list[float]) -> float:
    """``max(values)`` (0 for none), NaN when any value is NaN (Python's max would depend on the order)."""
    return math.nan if any(math.isnan(v) for v in values) else max(values, default=0.0)


def _bound(eps: float, lr: float, lf: float, steps: int) -> float:
    """The corrected Corollary 1.1 bound after ``steps`` steps (``steps * lr * eps`` without an L_f
    estimate). A non-finite ``eps`` (a NaN or inf reached the applied gradient; the sublayer check names
    where) gives a non-finite bound instead of an exception, so the report is still produced."""
    if not math.isfinite(eps):
        return eps
    if lf > 0 and math.isfinite(lf):
        return corollary11_bound(eps=eps, lr=lr, lipschitz_f=lf, steps=steps)
    return steps * lr * eps


def forward_query(model: CompiledModel, w: Tensor, x_query: Tensor) -> Tensor:
    """``f(w, x_query)`` with the exact network, shape ``(d_y,)``."""
    return forward(model.spec, w, x_query[None])[0]
