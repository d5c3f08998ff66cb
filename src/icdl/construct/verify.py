"""Verify a compiled GD transformer against reference gradient descent, sublayer by sublayer.

:func:`verify` runs the model on one prompt with a per-sublayer trace and compares

1. **the whole token state after every sublayer** with what the construction must produce — the
   *surrogate* recursion: the paper's p̄, r̄', ḡ, s̄ (Lemmas 2-5, eq. (C.6), (3.20)) evaluated directly with
   the same conditioned ReLU sums the heads use, at the transformer's own current w. Any disagreement beyond
   ``tol * max(1, |expected|)`` is a construction bug (or a rounding problem); the FIRST such sublayer is
   reported (step, index in block, role, slot). For ReLU networks the surrogate *is* exact GD (outside the
   relu' window), so the same check also proves agreement with GD;
2. per step, the errors of p, r', g, s against the **exact** Lemma 1 terms at the transformer's w
   (:func:`icdl.nets.lemma1_terms`-style recursion with the true r, r', u), the gradient error
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

from icdl.construct.blocks import SublayerInfo
from icdl.construct.compile import CompiledModel
from icdl.nets import empirical_risk, forward, get_loss, gradient, project, reference_gd, unflatten
from icdl.theory import corollary11_bound

__all__ = ["Divergence", "StepErrors", "VerifyReport", "estimate_lipschitz", "recursion", "verify"]

Fn = Callable[[Tensor], Tensor]


@dataclass
class Recursion:
    """The named terms of one GD step on all ``T = n + 1`` tokens (query last; its u and s are 0)."""

    pre: list[Tensor]
    p: list[Tensor]  # p[0] = x
    r_prime: list[Tensor]
    u: Tensor
    s: list[Tensor]
    grad: Tensor


def recursion(
    model: CompiledModel,
    w: Tensor,
    x_all: Tensor,
    y_all: Tensor,
    t: Tensor,
    *,
    surrogate: bool,
) -> Recursion:
    """The GD-step terms for weights ``w`` (P,), tokens ``x_all`` (T, d_x), ``y_all`` (T, d_y), mask t (T,).

    ``surrogate=True`` uses the model's conditioned ReLU sums (what the heads compute, paper (C.6), (3.20));
    ``surrogate=False`` the exact r, r', u (Lemma 1). ``grad`` is ``(1/(2n)) sum_t s_t(j) p_t(j-1)^T``.
    """
    spec = model.spec
    loss = get_loss(model.config.loss)
    n = int(t.sum().item())
    Vs = unflatten(spec, w)
    ps, pre, rp = [x_all], [], []
    for j, V in enumerate(Vs, start=1):
        z = ps[-1] @ V.t()
        pre.append(z)
        if surrogate:
            ps.append(model.terms.r[j - 1](z))
            rp.append(model.terms.r_prime[j - 1](z))
        else:
            act = spec.layer_act(j)
            ps.append(act.fn(z))
            rp.append(act.deriv(z))
    u = model.terms.u(ps[-1], y_all) if surrogate else loss.deriv(ps[-1], y_all)
    u = u * t[:, None]
    s: list[Tensor] = [torch.empty(0)] * spec.depth
    s[-1] = rp[-1] * u
    for j in range(spec.depth - 1, 0, -1):
        s[j - 1] = rp[j - 1] * (s[j] @ Vs[j])
    grad = torch.cat([(s[j].t() @ ps[j] / (2 * n)).reshape(-1) for j in range(spec.depth)])
    return Recursion(pre, ps, rp, u, s, grad)


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
    """Errors of one GD step l (1-based), max abs over tokens and coordinates unless said otherwise."""

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
    """The first sublayer whose output differs from the surrogate by more than the tolerance."""

    step: int  # 0-based GD step; == steps for the readout
    index: int  # 0-based index inside the block (or the readout)
    role: str
    slot: str
    error: float

    def describe(self) -> str:
        where = "readout" if self.index < 0 else f"step {self.step + 1}"
        return f"{where}, sublayer {self.index + 1} ({self.role}), slot {self.slot}: |err| = {self.error:.3g}"


@dataclass
class VerifyReport:
    """Result of :func:`verify`. ``passed`` means: no divergence from the surrogate beyond ``tol``."""

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
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.first_divergence is None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        return d

    def table(self) -> str:
        """A readable per-step table plus the summary lines."""
        cols = ("p", "r_prime", "g", "s", "w", "eps_l", "traj_l2", "bound")
        head = f"{'step':>4} " + " ".join(f"{c:>9}" for c in cols)
        rows = [head]
        for e in self.steps:
            rows.append(
                f"{e.step:>4} {e.p:9.2e} {e.r_prime:9.2e} {e.g:9.2e} {e.s:9.2e} {e.w:9.2e} {e.grad_l2:9.2e} "
                f"{e.trajectory_l2:9.2e} {e.bound_l2:9.2e}"
            )
        div = "none" if self.first_divergence is None else self.first_divergence.describe()
        rows += [
            f"sublayer check (tol {self.tol:.0e}): max err {self.max_sublayer_err:.2e}; "
            f"first divergence: {div}",
            f"max |w_TF - w_GD| = {self.max_abs_err_weights:.2e}; "
            f"prediction error = {self.max_abs_err_prediction:.2e}",
            f"w spread across tokens = {self.weights_spread:.1e}; "
            f"scratch after blocks = {self.scratch_max:.1e}",
            f"relu' window (0, delta) hits = {self.delta_window_count}; "
            f"outside [-R, R] = {self.out_of_range_count}; "
            f"gate margin = {self.gate_margin:.3g}",
            f"eps = {self.eps_grad:.2e}; L_f ~ {self.lipschitz_f:.3g} ({self.lipschitz_method}); "
            f"Corollary 1.1 bound {self.corollary_bound:.2e} vs trajectory error {self.trajectory_error:.2e}",
        ]
        return "\n".join(rows)


def _slot_errors(model: CompiledModel, got: Tensor, want: Tensor) -> tuple[float, str, float]:
    """Max over slots of ``|got - want| / max(1, |want|)``: (max relative error, its slot, its abs error)."""
    diff = (got - want).abs()
    rel = diff / want.abs().clamp_min(1.0)
    best, label, absval = 0.0, "", 0.0
    for s in model.layout.slots:
        r = float(rel[..., s.offset : s.offset + s.size].max())
        if r > best or not label:
            best, label, absval = r, s.label, float(diff[..., s.offset : s.offset + s.size].max())
    return best, label, absval


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
    """Run ``model`` on one prompt and compare it with reference GD (see the module docstring).

    Args:
        model: a compiled model.
        x: ``(n, d_x)`` inputs; y: ``(n, d_y)`` labels; x_query: ``(d_x,)``; w0: ``(P,)`` initial weights.
        tol: relative tolerance of the sublayer check (``|err| <= tol * max(1, |expected|)``).
        lipschitz_iters: power-iteration steps per trajectory point for the L_f estimate (0: skip).
    """
    t_start = time.perf_counter()
    dt = model.config.torch_dtype
    spec, L, layout = model.spec, model.steps, model.layout
    x, y, x_query, w0 = (v.to(dt) for v in (x, y, x_query, w0))
    n = x.shape[0]
    x_all = torch.cat([x, x_query[None]])
    y_all = torch.cat([y, torch.zeros(1, spec.out_dim, dtype=dt)])
    tmask = torch.cat([torch.ones(n, dtype=dt), torch.zeros(1, dtype=dt)])
    box, lr, loss = model.config.box, model.config.lr, model.config.loss
    W_idx = layout.indices("W")
    sl = {s.label: list(s.indices) for s in layout.slots}
    scratch_idx = layout.scratch_indices()

    H0 = model.build_prompt(x, y, x_query, w0)
    states: list[tuple[int, int, SublayerInfo, Tensor]] = []

    def trace(step: int, index: int, info: SublayerInfo, H: Tensor) -> None:
        states.append((step, index, info, H[0].clone()))

    t0 = time.perf_counter()
    out = model.run(H0, trace=trace)
    seconds_forward = time.perf_counter() - t0
    t0 = time.perf_counter()
    traj_gd = reference_gd(spec, loss, w0, x, y, lr=lr, steps=L, box=box)
    seconds_reference = time.perf_counter() - t0

    is_step = [t.delta is not None for t in model.terms.r_prime]
    fitted = any(not t.exact for t in (*model.terms.r, *model.terms.r_prime))
    counters = {"window": 0, "range": 0}
    gate_margin = math.inf

    def begin(w: Tensor) -> tuple[Recursion, Recursion]:
        nonlocal gate_margin
        sur = recursion(model, w, x_all, y_all, tmask, surrogate=True)
        ex = recursion(model, w, x_all, y_all, tmask, surrogate=False)
        assert model.config.delta is not None
        for j, z in enumerate(sur.pre):
            if is_step[j]:  # examples only: the query's r' never reaches the gradient (its g is 0)
                ze = z[:n]
                counters["window"] += int(((ze > 0) & (ze < model.config.delta)).sum())
            if fitted:
                counters["range"] += int((z.abs() > model.config.radius).sum())
        u = model.terms.u
        for a0, a1, b in zip(u.a0, u.a1, u.b, strict=True):
            arg = float((a0 * sur.p[-1] + a1 * y_all + b).abs().max())
            gate_margin = min(gate_margin, model.config.gate - arg)
        return sur, ex

    first: Divergence | None = None
    max_sub = 0.0
    cur = H0[0].clone()  # the state before the current sublayer
    step_w = w0
    w_tf = [w0]
    sur, ex = begin(w0)
    grad_err: list[float] = []
    per_step: list[dict[str, float]] = []
    acc = {"p": 0.0, "r_prime": 0.0, "g": 0.0, "s": 0.0}
    spread = scratch_max = 0.0
    for step, index, info, H in states:
        if index == 0 and step > 0:
            sur, ex = begin(step_w)
        role, j = info.role, info.layer
        exp = cur.clone()
        if role == "forward":
            exp[:, sl[f"P_{j}"]] = sur.p[j]
            acc["p"] = max(acc["p"], float((H[:, sl[f"P_{j}"]] - ex.p[j]).abs().max()))
        elif role == "derivative":
            for jj in range(1, spec.depth + 1):
                exp[:, sl[f"R_{jj}"]] = sur.r_prime[jj - 1]
                acc["r_prime"] = max(
                    acc["r_prime"], float((H[:, sl[f"R_{jj}"]] - ex.r_prime[jj - 1]).abs().max())
                )
        elif role == "loss":
            exp[:, sl["G"]] = sur.u
            acc["g"] = max(acc["g"], float((H[:, sl["G"]] - ex.u).abs().max()))
        elif role == "backward":
            exp[:, sl[f"S_{j}"]] = sur.s[j - 1]
            acc["s"] = max(acc["s"], float((H[:, sl[f"S_{j}"]] - ex.s[j - 1]).abs().max()))
        elif role == "update":
            exp[:, W_idx] = (step_w - lr * sur.grad)[None]
            g_tf = (step_w - H[-1, W_idx]) / lr  # the gradient the transformer applied
            grad_err.append(float((g_tf - gradient(spec, loss, step_w, x, y)).norm()))
        elif role == "project":
            exp[:, W_idx] = project(cur[:, W_idx], box)
            exp[:, scratch_idx] = 0.0
        elif role == "readout":
            exp[-1, sl["Y"]] = cur[-1, sl["Y"]] + sur.p[-1][-1]
        else:  # pragma: no cover - a new role must teach the verifier what it writes
            raise ValueError(f"verify() does not know what role {role!r} writes")
        rel, label, absval = _slot_errors(model, H, exp)
        max_sub = max(max_sub, rel)
        if first is None and not rel <= tol:
            first = Divergence(step, index, role, label, absval)
        cur = H  # continue from the transformer's own state: later checks localise their own errors
        if step < L and index == len(model.block) - 1:
            W = H[:, W_idx]
            spread = max(spread, float((W - W[0]).abs().max()))
            scratch_max = max(scratch_max, float(H[:, scratch_idx].abs().max()))
            step_w = W[-1].clone()
            w_tf.append(step_w)
            per_step.append(acc)
            acc = {"p": 0.0, "r_prime": 0.0, "g": 0.0, "s": 0.0}

    traj_tf = torch.stack(w_tf)
    eps = max(grad_err, default=0.0)
    if lipschitz_iters > 0 and L > 0:
        lf = estimate_lipschitz(model, [*w_tf, *traj_gd], x, y, iters=lipschitz_iters)
    else:
        lf = 0.0

    def bound(l: int) -> float:
        if lf > 0:
            return corollary11_bound(eps=eps, lr=lr, lipschitz_f=lf, steps=l)
        return l * lr * eps

    steps_out = []
    for l in range(1, L + 1):
        d = traj_tf[l] - traj_gd[l]
        e = per_step[l - 1]
        steps_out.append(
            StepErrors(
                l,
                e["p"],
                e["r_prime"],
                e["g"],
                e["s"],
                float(d.abs().max()),
                grad_err[l - 1],
                float(d.norm()),
                bound(l),
            )
        )
    pred = model.read_prediction(out)[0]
    pred_gd = forward_query(model, traj_gd[-1], x_query)
    pred_own = forward_query(model, traj_tf[-1], x_query)
    return VerifyReport(
        steps=steps_out,
        first_divergence=first,
        tol=tol,
        max_sublayer_err=max_sub,
        max_abs_err_weights=float((traj_tf - traj_gd).abs().max()),
        max_abs_err_prediction=float((pred - pred_gd).abs().max()),
        max_abs_err_prediction_own_w=float((pred - pred_own).abs().max()),
        weights_spread=spread,
        scratch_max=scratch_max,
        delta_window_count=counters["window"] if any(is_step) else None,
        out_of_range_count=counters["range"] if fitted else None,
        gate_margin=gate_margin,
        eps_grad=eps,
        lipschitz_f=lf,
        lipschitz_method=(
            f"max |Hessian eigenvalue| by {lipschitz_iters}-step power iteration "
            f"at {2 * (L + 1)} trajectory points (local)"
        ),
        corollary_bound=bound(L),
        trajectory_error=float((traj_tf[-1] - traj_gd[-1]).norm()),
        seconds_forward=seconds_forward,
        seconds_reference=seconds_reference,
        seconds_verify=time.perf_counter() - t_start,
        extra={
            "max_abs_weight": float(traj_gd.abs().max()),
            "max_abs_prediction": float(pred_gd.abs().max()),
        },
    )


def forward_query(model: CompiledModel, w: Tensor, x_query: Tensor) -> Tensor:
    """``f(w, x_query)`` with the exact network, shape ``(d_y,)``."""
    return forward(model.spec, w, x_query[None])[0]
