"""The result of [`icdl.construct.check.verify.verify`][icdl.construct.check.verify.verify]: per-step errors,
the first divergence, the PASS conditions and the verdict, and their table and JSON forms.

PASS requires (docs/construction.md, "What PASS guarantees"):

a. **sublayers**: every sublayer holds the surrogate its own sums define, within ``tol``
   (``first_divergence`` is None);
b. **ranges**: no argument of a fitted sum or product outside its range (``out_of_range_count`` 0 where the
   variant has fitted ones), no more relu' window hits than the variant allows, and the gate constant C above
   every ``|u|`` and ``|p(N)|`` (``gate_margin > 0``);
c. **budget**: every step's applied-gradient error ``eps_l`` within the variant's **a-priori** budget
   (``StepErrors.budget_l2``, [`icdl.construct.bounds.budget`][icdl.construct.bounds.budget]: derived from the
   declared sup errors, never from the measured error), and every step's trajectory error within Corollary 1.1
   evaluated at that budget (``StepErrors.bound_budget_l2``; checked when an L_f estimate was made).

Any failed condition is named in ``failures`` and the verdict is FAIL; otherwise a degenerate task (GD's
movement comes from the projection alone, or nothing: [`icdl.construct.task.gd_is_degenerate`]
[icdl.construct.task.gd_is_degenerate]) is DEGENERATE; otherwise a check that cannot tell GD from something
else is INCONCLUSIVE (``inconclusive`` names why), and the rest PASS. INCONCLUSIVE means:

i. **a step it cannot certify**: its a-priori budget is not below ``CHECKABLE_FRACTION`` (1/2) of both the
   true gradient norm ``||∇L_n(w̄^{l-1})||_2`` and the applied one ``||ḡ_l||_2``. Below it, every ``ḡ``
   within the budget is within 30 degrees of ``∇L_n`` and between 1/2 and 3/2 of its length, so a step that
   applied no gradient, or went uphill, would have failed (c); at or above it a no-op update could pass;
ii. **a vacuous trajectory bound**: Corollary 1.1 at the budget is not below ``CHECKABLE_FRACTION`` of the
   weights' own scale ``||w^l_GD||_2`` at some step (the bound then allows any weights of that size).

The report says which steps and what would make them checkable (float64, a larger lr, a smaller eps).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from icdl.theory import corollary11_bound

__all__ = [
    "CHECKABLE_FRACTION",
    "Divergence",
    "StepErrors",
    "VerifyReport",
    "corollary_bound",
    "max_or_nan",
    "verdict_label",
]

#: A step certifies that GD was applied only when its a-priori budget is below this fraction of the gradient
#: norms (true and applied), and a trajectory bound says something only below this fraction of ``||w_GD||``.
CHECKABLE_FRACTION = 0.5


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
        grad_l2: the measured ``eps_l = ||ḡ_l - ∇L_n(w̄^{l-1})||_2`` (ḡ: the gradient the transformer
        applied). budget_l2: the a-priori budget of ``eps_l``
        ([`icdl.construct.bounds.budget`][icdl.construct.bounds.budget]). trajectory_l2: ``||w̄^l -
        w^l_GD||_2``. bound_measured_l2: Corollary 1.1 at step l with the measured ``max_{k<=l} eps_k`` (a
            stability check of GD with those errors: it holds almost by construction).
        bound_budget_l2: Corollary 1.1 at step l with the a-priori ``max_{k<=l} budget_k`` (PASS (c)).
        grad_norm: ``||∇L_n(w̄^{l-1})||_2``, the true gradient at the step's start weights.
        applied_norm: ``||ḡ_l||_2``, the gradient the transformer applied.
        budget_approximation, budget_tolerance, budget_roundoff: the parts of ``budget_l2``.
        weight_norm: ``||w^l_GD||_2``, the scale the trajectory bound is compared with.
        prediction_bound: the a-priori bound on ``|f(w̄^l, x_q) - f(w^l_GD, x_q)|`` (max over outputs) from
            ``bound_budget_l2`` and the Lipschitz constant of ``f(., x_q)``
            (``icdl.construct.bounds.prediction``).
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
    grad_norm: float = math.nan
    applied_norm: float = math.nan
    budget_approximation: float = math.nan
    budget_tolerance: float = math.nan
    budget_roundoff: float = math.nan
    weight_norm: float = math.nan
    prediction_bound: float = math.nan

    def certifies(self, fraction: float = CHECKABLE_FRACTION) -> bool:
        """Whether the budget can tell this step's GD update from none: ``budget_l2`` below ``fraction`` of
        both ``grad_norm`` and ``applied_norm`` (False when any is NaN). A step whose true gradient is
        exactly 0 has no update to tell from none (GD does not move there; a task where that holds at every
        step is DEGENERATE), so it certifies what there is: that the applied gradient is within the budget
        of 0."""
        if self.grad_norm == 0.0:
            return True
        # each norm on its own: min() would drop a NaN applied norm when it comes second
        return self.budget_l2 < fraction * self.grad_norm and self.budget_l2 < fraction * self.applied_norm

    def bound_informative(self, fraction: float = CHECKABLE_FRACTION) -> bool:
        """Whether Corollary 1.1 at the budget is below ``fraction`` of the weights' scale ``||w^l_GD||``."""
        return self.bound_budget_l2 < fraction * self.weight_norm


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
    """Result of [`verify`][icdl.construct.check.verify.verify]: see the module docstring for the PASS
    conditions. ``verdict`` is ``"FAIL"`` when any condition fails (``failures`` names each), else
    ``"DEGENERATE"`` when reference GD never moves w (``weights_moved`` = ``max |w_L - w_0|`` is 0 with L >= 1
    steps: every comparison with GD is then trivially exact, so the check proves nothing), else ``"PASS"``.
    ``passed`` means ``verdict == "PASS"``.

    Error fields: ``eps_grad`` is the measured ``max_l eps_l``, ``grad_budget`` the largest a-priori step
    budget; ``corollary_bound_measured`` and ``corollary_bound_budget`` are Corollary 1.1 after L steps at
    each of them. ``window_hits_allowed`` is the variant's allowance of relu' window hits;
    ``trajectory_checked`` says whether the trajectory part of (c) was checked (it needs the L_f estimate).
    ``max_abs_err_f`` is ``max_i |f_i(w̄_L, x_q) - f_i(w^L_GD, x_q)|`` (the exact network at both final
    weights), ``prediction_bound`` its a-priori bound: Corollary 1.1 at the budget times the Lipschitz
    constant of ``f(., x_q)`` on that ball
    ([`icdl.construct.bounds.prediction`][icdl.construct.bounds.prediction]); it holds whenever (c) does.
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
    delta: float | None = None
    sum_error_ratio: float | None = None
    worst_sum: tuple[str, int, float, float] | None = None
    product_error_ratio: float | None = None
    worst_product: tuple[str, int, float, float] | None = None
    step_range_count: int | None = None
    step_limit: float | None = None
    max_abs_err_f: float = math.nan
    prediction_bound: float = math.nan
    dtype: str = "float64"
    range_auto: bool | None = None
    checkable_fraction: float = CHECKABLE_FRACTION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[str]:
        """The failed PASS conditions, one line each (empty: all hold)."""
        out: list[str] = []
        if self.step_range_count:
            # first: a relu' step out of its floating-point range is why its sublayer then diverges
            out.append(
                f"(b) range: {self.step_range_count} ReLU pre-activation(s) with |z| >= "
                f"{self.step_limit:.3g} = delta x 2 / eps_mach ({self.dtype}), where the relu' step "
                "relu(z/delta) - relu(z/delta - 1) is no longer 0 or 1; use --dtype float64, a larger "
                "--delta, or a prompt with smaller |z|"
            )
        if self.first_divergence is not None:
            out.append(f"(a) sublayer beyond tol {self.tol:.0e}: {self.first_divergence.describe()}")
        if self.out_of_range_count:
            hint = ""
            if self.range_auto is False:
                hint = " (a fixed range: --range auto / radius='auto' fits the ranges to this prompt)"
            elif self.range_auto:
                hint = (
                    " (--range auto capped a bound with the box: try a smaller --box or an explicit --range)"
                )
            out.append(
                f"(b) range: {self.out_of_range_count} argument(s) of fitted sums or products outside the "
                f"range they were fitted on{hint}"
            )
        hits = self.delta_window_count
        if hits is not None and hits > self.window_hits_allowed:
            how = ""
            if self.delta is not None:
                how = f"; delta = {self.delta:g} ({self.dtype}): a smaller --delta narrows the window" + (
                    ", or --dtype float64 (delta 1e-9)" if self.dtype != "float64" else ""
                )
            out.append(
                f"(b) relu' window: {hits} hits 0 < z < delta (the variant allows {self.window_hits_allowed})"
                + how
            )
        if self.sum_error_ratio is not None and self.sum_error_ratio > 1 and self.worst_sum is not None:
            name, j, err, declared = self.worst_sum
            out.append(
                f"(b) declared: the {name} sum of layer {j} errs by {err:.3g} on the arguments it saw, above "
                f"its declared sup error {declared:.3g} (the budget assumes the declared one)"
            )
        ratio, worst = self.product_error_ratio, self.worst_product
        if ratio is not None and ratio > 1 and worst is not None:
            kind, j, err, declared = worst
            out.append(
                f"(b) declared: the {kind} product of layer {j} errs by {err:.3g} on the factors it saw, "
                f"above its declared sup error {declared:.3g} (the budget assumes the declared one)"
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
    def uncheckable_steps(self) -> list[int]:
        """The steps (1-based) whose budget cannot tell their GD update from none
        ([`StepErrors.certifies`][icdl.construct.check.report.StepErrors.certifies])."""
        return [e.step for e in self.steps if not e.certifies(self.checkable_fraction)]

    @property
    def vacuous_bound_steps(self) -> list[int]:
        """The steps whose Corollary 1.1 bound at the budget is not below the fraction of ``||w^l_GD||``
        (checked with the trajectory part of (c))."""
        if not self.trajectory_checked:
            return []
        return [e.step for e in self.steps if not e.bound_informative(self.checkable_fraction)]

    def _remedy(self, steps: list[int]) -> str:
        """What would make ``steps`` checkable: the remedy of the largest part of their worst budget."""
        worst = max(
            (e for e in self.steps if e.step in steps),
            key=lambda e: e.budget_l2 / e.grad_norm,
        )
        parts = {
            "tolerance": worst.budget_tolerance,
            "approximation": worst.budget_approximation,
            "round-off": worst.budget_roundoff,
        }
        top = max(parts, key=lambda k: parts[k] if math.isfinite(parts[k]) else math.inf)
        if top == "tolerance":
            how = "a larger --lr (the tolerance's share is tol max(1, |w|) / lr) or a smaller --tol"
            if self.dtype != "float64":
                how = "float64 (--dtype float64: tol 1e-9 instead of 1e-4), " + how
        elif top == "approximation":
            how = "a smaller --eps (the declared errors of the fitted sums and products)"
        else:
            how = "float64 (--dtype float64)" if self.dtype != "float64" else "a larger --lr"
        return f"the budget is mostly {top}: {how}"

    @property
    def inconclusive(self) -> list[str]:
        """Why the check cannot tell GD from something else, one line each (empty: it can); see the module
        docstring (i) and (ii)."""
        out: list[str] = []
        frac = self.checkable_fraction
        bad = self.uncheckable_steps
        if bad:
            e = max(
                (e for e in self.steps if e.step in bad),
                key=lambda e: e.budget_l2 / e.grad_norm if e.grad_norm > 0 else math.inf,
            )
            out.append(
                f"(i) budget: {_steps(bad, len(self.steps))}: a-priori budget not below {frac:g} x the "
                f"gradient norm (worst: step {e.step}, budget {e.budget_l2:.3g} vs ||grad L_n|| "
                f"{e.grad_norm:.3g}, applied {e.applied_norm:.3g}), so a step that applied no gradient "
                f"could pass; to make them checkable: {self._remedy(bad)}"
            )
        vac = self.vacuous_bound_steps
        if vac:
            e = next(e for e in self.steps if e.step == vac[0])
            out.append(
                f"(ii) trajectory: {_steps(vac, len(self.steps))}: Corollary 1.1 at the budget not below "
                f"{frac:g} x ||w_GD|| (first: step {e.step}, {e.bound_budget_l2:.3g} vs "
                f"{e.weight_norm:.3g}); "
                "to make it informative: fewer --steps, a smaller --lr or a smaller budget"
            )
        return out

    @property
    def verdict(self) -> str:
        """``"PASS"``, ``"FAIL"``, ``"DEGENERATE"`` or ``"INCONCLUSIVE"`` (see the module docstring):
        FAIL first, then DEGENERATE (no budget could make a degenerate task informative), then
        INCONCLUSIVE."""
        if self.failures:
            return "FAIL"
        if self.degenerate:
            return "DEGENERATE"
        return "INCONCLUSIVE" if self.inconclusive else "PASS"

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def describe(self) -> str:
        """One line: the verdict and, on FAIL, every failed condition."""
        fails = self.failures
        if fails:
            return "FAIL: " + "; ".join(fails)
        if self.degenerate:
            return (
                "DEGENERATE: GD's movement comes from the projection alone (or nothing), so the check "
                "proves nothing"
            )
        if self.inconclusive:
            return "INCONCLUSIVE: " + "; ".join(self.inconclusive)
        return "PASS: sublayers within tol, ranges hold, every step within its a-priori budget"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        d["verdict"] = self.verdict
        d["failures"] = self.failures
        d["inconclusive"] = self.inconclusive
        d["uncheckable_steps"] = self.uncheckable_steps
        d["vacuous_bound_steps"] = self.vacuous_bound_steps
        d["first_divergence"] = None if self.first_divergence is None else self.first_divergence.describe()
        d["first_divergence_at"] = None if self.first_divergence is None else asdict(self.first_divergence)
        return d

    def table(self) -> str:
        """A readable per-step table, its legend and the summary lines ("—" where a check does not apply)."""
        cols = ("p", "r_prime", "u", "s", "w", "eps_l", "budget", "|grad|", "traj_l2", "bnd_eps", "bnd_budg")
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
                e.grad_norm,
                e.trajectory_l2,
                e.bound_measured_l2,
                e.bound_budget_l2,
            )
            mark = "" if e.certifies(self.checkable_fraction) else "  uncheckable"
            rows.append(f"{e.step:>4} " + " ".join(num(v) for v in vals) + mark)
        rows += [
            "legend: p, r_prime, u, s = max |slot - exact Lemma 1 term| at the transformer's w "
            "(— = not a slot of this variant); w = max |w_TF - w_GD|;",
            "        eps_l = ||applied gradient - grad L_n||_2; budget = its a-priori bound; "
            "|grad| = ||grad L_n||_2; traj_l2 = ||w_TF - w_GD||_2;",
            f"        uncheckable = budget not below {self.checkable_fraction:g} x |grad| (or the applied "
            "gradient's norm): the step cannot tell GD from no update;",
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
            f"|f(w_TF, x_q) - f(w_GD, x_q)| = {self.max_abs_err_f:.2e}; a-priori bound "
            f"{self.prediction_bound:.2e} (Corollary 1.1 at the budget x the Lipschitz constant of "
            "f(., x_q))",
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
            *(["inconclusive " + line for line in self.inconclusive] if not fails else []),
        ]


def _steps(steps: list[int], total: int) -> str:
    """``"steps 1-5 (5 of 5)"``, ``"step 3 (1 of 5)"`` or ``"steps 1, 4, 7 (3 of 9)"`` (runs of consecutive
    steps as ranges)."""
    runs: list[list[int]] = []
    for s in steps:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
    return f"{'step' if len(steps) == 1 else 'steps'} {text} ({len(steps)} of {total})"
