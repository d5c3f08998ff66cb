"""The result of [`icdl.construct.verify.verify`][icdl.construct.verify.verify]: per-step errors, the first
divergence, the PASS conditions and the verdict, and their table and JSON forms.

PASS requires (docs/construction.md, "What PASS guarantees"):

a. **sublayers**: every sublayer holds the surrogate its own sums define, within ``tol``
   (``first_divergence`` is None);
b. **ranges**: no argument of a fitted sum or product outside its range (``out_of_range_count`` 0 where the
   variant has fitted ones), no more relu' window hits than the variant allows, and the gate constant C above
   every ``|u|`` and ``|p(N)|`` (``gate_margin > 0``);
c. **budget**: every step's applied-gradient error ``eps_l`` within the variant's **a-priori** budget
   (``StepErrors.budget_l2``, [`icdl.construct.budget`][icdl.construct.budget]: derived from the declared sup
   errors, never from the measured error), and every step's trajectory error within Corollary 1.1 evaluated
   at that budget (``StepErrors.bound_budget_l2``; checked when an L_f estimate was made).

Any failed condition is named in ``failures`` and the verdict is FAIL; otherwise a task on which GD never
moves w is DEGENERATE, and the rest PASS.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from icdl.theory import corollary11_bound

__all__ = ["Divergence", "StepErrors", "VerifyReport", "corollary_bound", "max_or_nan", "verdict_label"]


def verdict_label(verdict: str, failures: list[str]) -> str:
    """The verdict with the labels of its failed conditions, for a table cell: ``"FAIL (b) range, (c)
    budget"`` from failures ``"(b) range: ..."`` and ``"(c) budget: ..."`` (each label once, sorted)."""
    labels = sorted({f.split(":")[0] for f in failures})
    return " ".join([verdict, ", ".join(labels)]) if labels else verdict


def max_or_nan(values: list[float]) -> float:
    """``max(values)`` (0 for none), NaN when any value is NaN (Python's max would depend on the order)."""
    return math.nan if any(math.isnan(v) for v in values) else max(values, default=0.0)


def corollary_bound(eps: float, lr: float, lf: float, steps: int) -> float:
    """The corrected Corollary 1.1 bound ``L_f^{-1} ((1 + η L_f)^l - 1) eps`` after ``steps`` steps
    ([`corollary11_bound`][icdl.theory_bounds.corollary11_bound]; ``steps * lr * eps`` without an L_f
    estimate). A non-finite ``eps`` (a NaN or inf reached the applied gradient; the sublayer check names
    where) gives a non-finite bound instead of an exception, so the report is still produced."""
    if not math.isfinite(eps):
        return eps
    if lf > 0 and math.isfinite(lf):
        return corollary11_bound(eps=eps, lr=lr, lipschitz_f=lf, steps=steps)
    return steps * lr * eps


@dataclass
class StepErrors:
    """Errors of one GD step l (1-based), max abs over tokens and coordinates unless said otherwise; p,
    r_prime, u and s are NaN when no expected effect of the variant names that quantity.

    Attributes:
        grad_l2: the measured ``eps_l = ||ḡ_l - ∇L_n(w̄^{l-1})||_2`` (ḡ: the gradient the transformer applied).
        budget_l2: the a-priori budget of ``eps_l`` ([`icdl.construct.budget`][icdl.construct.budget]).
        trajectory_l2: ``||w̄^l - w^l_GD||_2``.
        bound_measured_l2: Corollary 1.1 at step l with the measured ``max_{k<=l} eps_k`` (a stability check
            of GD with those errors: it holds almost by construction).
        bound_budget_l2: Corollary 1.1 at step l with the a-priori ``max_{k<=l} budget_k`` (PASS (c)).
    """

    step: int
    p: float
    r_prime: float
    u: float  # error of the loss derivative u (Lemma 3)
    s: float
    w: float  # max |w̄^l - w^l_GD| (trajectory)
    grad_l2: float
    budget_l2: float
    trajectory_l2: float
    bound_measured_l2: float
    bound_budget_l2: float


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
class VerifyReport:
    """Result of [`verify`][icdl.construct.verify.verify]: see the module docstring for the PASS conditions.
    ``verdict`` is ``"FAIL"`` when any condition fails (``failures`` names each), else ``"DEGENERATE"`` when
    reference GD never moves w (``weights_moved`` = ``max |w_L - w_0|`` is 0 with L >= 1 steps: every
    comparison with GD is then trivially exact, so the check proves nothing), else ``"PASS"``. ``passed``
    means ``verdict == "PASS"``.

    Error fields: ``eps_grad`` is the measured ``max_l eps_l``, ``grad_budget`` the largest a-priori step
    budget; ``corollary_bound_measured`` and ``corollary_bound_budget`` are Corollary 1.1 after L steps at
    each of them. ``window_hits_allowed`` is the variant's allowance of relu' window hits;
    ``trajectory_checked`` says whether the trajectory part of (c) was checked (it needs the L_f estimate).
    """

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
    grad_budget: float
    lipschitz_f: float
    lipschitz_method: str
    corollary_bound_measured: float
    corollary_bound_budget: float
    trajectory_error: float
    seconds_forward: float
    seconds_reference: float
    seconds_verify: float
    weights_moved: float = math.nan
    degenerate: bool = False
    window_hits_allowed: int = 0
    trajectory_checked: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[str]:
        """The failed PASS conditions, one line each (empty: all hold)."""
        out: list[str] = []
        if self.first_divergence is not None:
            out.append(f"(a) sublayer beyond tol {self.tol:.0e}: {self.first_divergence.describe()}")
        if self.out_of_range_count:
            out.append(
                f"(b) range: {self.out_of_range_count} argument(s) of fitted sums or products outside the "
                "range they were fitted on"
            )
        hits = self.delta_window_count
        if hits is not None and hits > self.window_hits_allowed:
            out.append(
                f"(b) relu' window: {hits} hits 0 < z < delta (the variant allows {self.window_hits_allowed})"
            )
        if not self.gate_margin > 0:
            out.append(f"(b) gate: |u| or |p(N)| reaches the gate constant C (margin {self.gate_margin:.3g})")
        out += self._budget_failures()
        return out

    def _budget_failures(self) -> list[str]:
        """Condition (c): the steps whose gradient error exceeds the budget, and whose trajectory error
        exceeds Corollary 1.1 at the budget (first step and how many)."""
        out: list[str] = []
        over = [e for e in self.steps if not e.grad_l2 <= e.budget_l2]
        if over:
            e = over[0]
            out.append(
                f"(c) budget: step {e.step} applied-gradient error {e.grad_l2:.3g} > a-priori budget "
                f"{e.budget_l2:.3g}" + (f" ({len(over)} steps over)" if len(over) > 1 else "")
            )
        if self.trajectory_checked:
            far = [e for e in self.steps if not e.trajectory_l2 <= e.bound_budget_l2 * (1 + 1e-9)]
            if far:
                e = far[0]
                out.append(
                    f"(c) trajectory: step {e.step} ||w_TF - w_GD|| {e.trajectory_l2:.3g} > Corollary 1.1 at "
                    f"the budget {e.bound_budget_l2:.3g}"
                    + (f" ({len(far)} steps over)" if len(far) > 1 else "")
                )
        return out

    @property
    def verdict(self) -> str:
        """``"PASS"``, ``"FAIL"`` or ``"DEGENERATE"`` (see the class docstring)."""
        if self.failures:
            return "FAIL"
        return "DEGENERATE" if self.degenerate else "PASS"

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def describe(self) -> str:
        """One line: the verdict and, on FAIL, every failed condition."""
        fails = self.failures
        if fails:
            return "FAIL: " + "; ".join(fails)
        if self.degenerate:
            return "DEGENERATE: reference GD never moves w, so the check proves nothing"
        return "PASS: sublayers within tol, ranges hold, every step within its a-priori budget"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        d["verdict"] = self.verdict
        d["failures"] = self.failures
        d["first_divergence"] = None if self.first_divergence is None else self.first_divergence.describe()
        d["first_divergence_at"] = None if self.first_divergence is None else asdict(self.first_divergence)
        return d

    def table(self) -> str:
        """A readable per-step table, its legend and the summary lines ("—" where a check does not apply)."""
        cols = ("p", "r_prime", "u", "s", "w", "eps_l", "budget", "traj_l2", "bnd_eps", "bnd_budg")
        head = f"{'step':>4} " + " ".join(f"{c:>9}" for c in cols)
        rows = [head]

        def num(v: float) -> str:
            return f"{'—':>9}" if math.isnan(v) else f"{v:9.2e}"

        for e in self.steps:
            vals = (
                e.p,
                e.r_prime,
                e.u,
                e.s,
                e.w,
                e.grad_l2,
                e.budget_l2,
                e.trajectory_l2,
                e.bound_measured_l2,
                e.bound_budget_l2,
            )
            rows.append(f"{e.step:>4} " + " ".join(num(v) for v in vals))
        rows += [
            "legend: p, r_prime, u, s = max |slot - exact Lemma 1 term| at the transformer's w "
            "(— = not a slot of this variant); w = max |w_TF - w_GD|;",
            "        eps_l = ||applied gradient - grad L_n||_2; budget = its a-priori bound; "
            "traj_l2 = ||w_TF - w_GD||_2;",
            "        bnd_eps, bnd_budg = Corollary 1.1 (corrected) at step l, at the measured eps / at the "
            "budget",
        ]
        return "\n".join(rows + self._summary())

    def _summary(self) -> list[str]:
        div = "none" if self.first_divergence is None else self.first_divergence.describe()

        def opt(v: int | None) -> str:
            return "—" if v is None else str(v)

        parts = self.extra.get("budget_parts", {})
        split = ", ".join(f"{k} {v:.1e}" for k, v in parts.items())
        fails = self.failures
        return [
            f"sublayer check (tol {self.tol:.0e}): max err {self.max_sublayer_err:.2e}; "
            f"first divergence: {div}",
            f"max |w_TF - w_GD| = {self.max_abs_err_weights:.2e}; "
            f"prediction error = {self.max_abs_err_prediction:.2e}",
            f"w spread across tokens = {self.weights_spread:.1e}; "
            f"scratch after blocks = {self.scratch_max:.1e}",
            f"relu' window (0, delta) hits = {opt(self.delta_window_count)} "
            f"(allowed {self.window_hits_allowed}); "
            f"outside [-R, R] = {opt(self.out_of_range_count)}; "
            f"gate margin = {self.gate_margin:.3g}",
            f"eps = {self.eps_grad:.2e} measured, {self.grad_budget:.2e} a-priori budget"
            + (f" ({split})" if split else "")
            + f"; L_f ~ {self.lipschitz_f:.3g} ({self.lipschitz_method})",
            f"Corollary 1.1 bound {self.corollary_bound_budget:.2e} at the budget "
            f"({self.corollary_bound_measured:.2e} at the measured eps) vs trajectory error "
            f"{self.trajectory_error:.2e}"
            + ("" if self.trajectory_checked else " (not checked: no L_f estimate)"),
            f"GD moves w by max |w_L - w_0| = {self.weights_moved:.2e}"
            + ("; DEGENERATE task: GD never moves w, so the check proves nothing" if self.degenerate else ""),
            "conditions   " + ("all hold" if not fails else "FAILED: " + "; ".join(fails)),
        ]
