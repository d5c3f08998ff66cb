"""The result of [`icdl.construct.verify.verify`][icdl.construct.verify.verify]: per-step errors, the first
divergence, the verdict, and their table and JSON forms."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Divergence", "StepErrors", "VerifyReport"]


@dataclass
class StepErrors:
    """Errors of one GD step l (1-based), max abs over tokens and coordinates unless said otherwise; p,
    r_prime, u and s are NaN when no expected effect of the variant names that quantity."""

    step: int
    p: float
    r_prime: float
    u: float  # error of the loss derivative u (Lemma 3)
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
class VerifyReport:
    """Result of [`verify`][icdl.construct.verify.verify]. ``verdict`` is ``"FAIL"`` when some sublayer
    diverges from its expected effect beyond ``tol``, else ``"DEGENERATE"`` when reference GD never moves w
    (``weights_moved`` = ``max |w_L - w_0|`` is 0 with L >= 1 steps: every comparison with GD is then
    trivially exact, so the check proves nothing), else ``"PASS"``. ``passed`` means ``verdict == "PASS"``."""

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
            vals = (e.p, e.r_prime, e.u, e.s, e.w, e.grad_l2, e.trajectory_l2, e.bound_l2)
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
