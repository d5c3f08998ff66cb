"""``gd_target``: gradient descent on the target architecture with step size AND step count tuned.

The algorithm the paper's construction compiles (L steps of GD on the bias-free N-layer network, eq.
2.2-2.3, [`icdl.nets.gradient`][icdl.nets.gradient]), run per prompt and k from one seeded SMALL
initialisation (``init_std`` times He scaling, default 0.1, as
[`icdl.icl.baselines.simple.GDBaseline`][icdl.icl.baselines.simple.GDBaseline] draws it), with the pair ``(lr,
steps)`` chosen on HELD-OUT prompts
([`GDTargetBaseline.tune`][icdl.icl.baselines.gd_target.GDTargetBaseline.tune]): the best mean held-out MSE
over k = 1..n-1. Every step count of the grid is a checkpoint of ONE trajectory per step size, so the grid
costs ``len(lr_grid) x max(steps_grid)`` GD steps per k.

Divergence guard (docs/baselines.md). A large step size can blow up on some prompts only. A prediction is
*blown up* when it is not finite or ``|ŷ| > BLOWUP x max |y|`` over the held-out labels (``bound``, fixed at
tuning time, never from test labels). In tuning, a pair with any blown-up held-out prediction fails (it is
excluded, its MSE recorded as None). At test time a blown-up prediction is replaced by the prediction of
the start ``w0`` (zero steps: no update), and counted in ``fallbacks``; R² therefore stays finite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from icdl import nets
from icdl.errors import InputError
from icdl.icl.baselines.simple import GDBaseline, check_prompts

__all__ = ["BLOWUP", "DEFAULT_LR_GRID", "DEFAULT_STEPS_GRID", "K_BLOCK", "GDTargetBaseline"]

# Last session's grid (lr 1e-4..1, steps 1..30) chose its corner, lr 1.0 and 30 steps: both ends widened.
DEFAULT_LR_GRID: tuple[float, ...] = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0)
DEFAULT_STEPS_GRID: tuple[int, ...] = (1, 3, 10, 30, 100)
BLOWUP = 10.0
#: k's per batched block of
#: [`GDTargetBaseline.trajectories`][icdl.icl.baselines.gd_target.GDTargetBaseline.trajectories].
#: On a CPU, 1 (no padding) is fastest: the GD problems are compute-bound and a block of K pads each context
#: to its largest k (docs/baselines.md, gd_target timing); larger blocks suit an accelerator.
K_BLOCK = 1


@dataclass
class GDTargetBaseline:
    """GD on ``spec`` from ``w0 ~ init_std · He`` (seeded), ``(lr, steps)`` tuned on held-out prompts.

    ``lr`` and ``steps`` may be given directly; otherwise `tune` sets them, the divergence ``bound``, and
    records ``tuning = {"lr_grid", "steps_grid", "mse" (steps x lr, None where it failed), "failed"
    (steps x lr, True where a held-out prediction blew up), "lr", "steps", "bound", "num_prompts"}``.
    ``fallbacks``: predictions of the last call replaced by the start's (module docstring).
    """

    spec: nets.NetSpec
    lr_grid: Sequence[float] = DEFAULT_LR_GRID
    steps_grid: Sequence[int] = DEFAULT_STEPS_GRID
    init_std: float = 0.1
    seed: int = 0
    loss: str = "squared"
    lr: float | None = None
    steps: int | None = None
    bound: float = math.inf
    tuning: dict[str, Any] | None = field(default=None)
    fallbacks: int = 0

    def __post_init__(self) -> None:
        if not self.lr_grid or not all(math.isfinite(v) and v > 0 for v in self.lr_grid):
            raise InputError("gd_target lr grid must hold finite numbers > 0")
        if not self.steps_grid or not all(isinstance(v, int) and v >= 1 for v in self.steps_grid):
            raise InputError("gd_target steps grid must hold integers >= 1")
        if not (math.isfinite(self.init_std) and self.init_std > 0):
            raise InputError(f"gd_target init_std must be a finite number > 0, got {self.init_std!r}")

    @property
    def name(self) -> str:
        return "gd_target"

    def _gd(self, lr: float, steps: int) -> GDBaseline:
        return GDBaseline(
            self.spec, steps=steps, lr=lr, loss=self.loss, seed=self.seed, init_std=self.init_std
        )

    def trajectory(self, xs: Tensor, ys: Tensor, lr: float, steps: Sequence[int]) -> Tensor:
        """Predictions ``(len(steps) + 1, B, n, d_y)`` after 0 and after each count in ``steps`` GD steps.

        ``[0]`` is the start ``f(w0, x_k)``; ``[i + 1, :, k]`` is ``f(w_L, x_k)`` after ``L = steps[i]``
        steps of size ``lr`` on the first k examples (``[.., 0]`` stays at the start: no data). One step
        size of [`trajectories`][icdl.icl.baselines.gd_target.GDTargetBaseline.trajectories].
        """
        return self.trajectories(xs, ys, [lr], steps)[0]

    def trajectories(
        self,
        xs: Tensor,
        ys: Tensor,
        lrs: Sequence[float],
        steps: Sequence[int],
        *,
        block: int = K_BLOCK,
        drop_nan: bool = False,
    ) -> Tensor:
        """[`trajectory`][icdl.icl.baselines.gd_target.GDTargetBaseline.trajectory] for every step size in
        ``lrs`` at once: ``(len(lrs), len(steps) + 1, B, n, d_y)``.

        Vectorised over (step size, prompt, k): the ``block`` k's ``a..b`` are one flat batch of
        ``len(lrs) x B x block`` GD problems on the padded context ``x_0..x_{b-1}``, where problem k
        weighs row i by ``[i < k] · b / k``, so Lemma 1's ``(1/(2b)) Σ_i`` is the mean over its own k
        examples (eq. 2.2) and rows ``i >= k`` add exactly 0: causal in k. Every step count in ``steps`` is
        a checkpoint of the same trajectory. ``drop_nan`` (tuning only): a step size stops as soon as one
        of its problems has a NaN weight — NaN propagates, so every later checkpoint of it would fail the
        guard anyway — and its later checkpoints are NaN for all prompts.
        """
        check_prompts(xs, ys)
        if not (isinstance(block, int) and block >= 1):
            raise InputError(f"gd_target block must be an integer >= 1, got {block!r}")
        L, B, n = len(lrs), xs.shape[0], xs.shape[1]
        w0 = self._gd(float(lrs[0]), 1).initial_weights(xs.dtype, xs.device)
        start = nets.forward(self.spec, w0.expand(B, -1), xs)  # (B, n, d_y)
        out = start.expand(L, len(steps) + 1, *start.shape).clone()
        lr = torch.tensor([float(v) for v in lrs], dtype=xs.dtype, device=xs.device)
        for a in range(1, n, block):
            b = min(a + block, n) - 1  # k = a..b, context rows 0..b-1
            self._run_block(xs, ys, a, b, lr, steps, out, drop_nan)
        return out

    def _run_block(
        self,
        xs: Tensor,
        ys: Tensor,
        a: int,
        b: int,
        lr: Tensor,
        steps: Sequence[int],
        out: Tensor,
        drop: bool,
    ) -> None:
        """GD for k = a..b and every step size (``lr (L,)``), written into ``out[:, :, :, a..b]``."""
        loss = nets.get_loss(self.loss)
        L, B, K = lr.shape[0], xs.shape[0], b + 1 - a
        want = {int(s): i + 1 for i, s in enumerate(steps)}
        ks = torch.arange(a, b + 1, dtype=xs.dtype, device=xs.device)[:, None]  # (K, 1)
        rows = torch.arange(b, dtype=xs.dtype, device=xs.device)[None, :]  # (1, b)
        # per problem, ordered (lr, prompt, k): row weights, context, query x_k, step size
        weight = ((rows < ks).to(xs.dtype) * (b / ks)).repeat(L * B, 1)[..., None]  # (LBK, b, 1)
        x = xs[None, :, None, :b].expand(L, B, K, b, -1).reshape(L * B * K, b, -1)
        y = ys[None, :, None, :b].expand(L, B, K, b, -1).reshape(L * B * K, b, -1)
        query = xs[None, :, a : b + 1, None].expand(L, B, K, 1, -1).reshape(L * B * K, 1, -1)
        step_size = lr[:, None].expand(L, B * K).reshape(L * B * K, 1)
        alive = torch.arange(L, device=xs.device)  # step sizes still running (drop)
        w = self._gd(1.0, 1).initial_weights(xs.dtype, xs.device).expand(L * B * K, -1)

        def u(p: Tensor, t: Tensor) -> Tensor:  # loss derivative, rows weighed (the causal mask)
            return loss.deriv(p, t) * weight

        for step in range(1, max(want) + 1):
            grad = nets.lemma1_terms(self.spec, loss, w, x, y, u=u).grad
            w = nets.project(w - step_size * grad, None)
            if drop:
                bad = w.isnan().reshape(len(alive), -1).any(-1)
                if bool(bad.any()):
                    later = [i for s, i in want.items() if s >= step]  # checkpoints from this step on
                    out[alive[bad][:, None], torch.tensor(later)[None, :], :, a : b + 1] = math.nan
                    keep = (~bad).repeat_interleave(B * K)
                    w, x, y, weight, query, step_size = (t[keep] for t in (w, x, y, weight, query, step_size))
                    alive = alive[~bad]
                    if not len(alive):
                        return
            if step in want:
                pred = nets.forward(self.spec, w, query)[:, 0].reshape(len(alive), B, K, -1)
                out[alive, want[step], :, a : b + 1] = pred

    def _blown(self, preds: Tensor, bound: float) -> Tensor:
        return ~preds.isfinite() | (preds.abs() > bound)

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        if self.lr is None or self.steps is None:
            raise InputError("gd_target: lr and steps are not set; call tune() on held-out prompts")
        traj = self.trajectory(xs, ys, self.lr, [self.steps])
        preds, start = traj[1], traj[0]
        bad = self._blown(preds, self.bound)
        self.fallbacks = int(bad.sum())
        return torch.where(bad, start, preds)

    def tune(self, xs_val: Tensor, ys_val: Tensor) -> tuple[float, int]:
        """Pick the grid pair with the lowest mean held-out MSE over k = 1..n-1; a pair with any blown-up
        held-out prediction fails. Sets ``lr``, ``steps``, ``bound`` (``BLOWUP x max |y_val|``) and
        ``tuning``."""
        check_prompts(xs_val, ys_val)
        if xs_val.shape[1] < 2:
            raise InputError("tuning needs prompts with at least 2 points (k >= 1)")
        bound = BLOWUP * float(ys_val.abs().max())
        steps = [int(s) for s in self.steps_grid]
        table = [[math.inf] * len(self.lr_grid) for _ in steps]
        failed = [[False] * len(self.lr_grid) for _ in steps]
        with torch.no_grad():
            every = self.trajectories(xs_val, ys_val, [float(v) for v in self.lr_grid], steps, drop_nan=True)
        for j in range(len(self.lr_grid)):
            traj = every[j, 1:, :, 1:]  # (S, B, n-1, d_y)
            for i in range(len(steps)):
                if bool(self._blown(traj[i], bound).any()):
                    failed[i][j] = True
                else:
                    table[i][j] = float(((traj[i] - ys_val[:, 1:]) ** 2).mean())
        best = min(
            ((i, j) for i in range(len(steps)) for j in range(len(self.lr_grid))),
            key=lambda ij: table[ij[0]][ij[1]],
        )
        if not math.isfinite(table[best[0]][best[1]]):
            raise InputError("gd_target diverged for every (lr, steps) in the grid")
        self.steps, self.lr, self.bound = steps[best[0]], float(self.lr_grid[best[1]]), bound
        self.tuning = {
            "lr_grid": [float(v) for v in self.lr_grid],
            "steps_grid": steps,
            "mse": [[v if math.isfinite(v) else None for v in row] for row in table],
            "failed": failed,
            "lr": self.lr,
            "steps": self.steps,
            "bound": bound,
            "num_prompts": int(xs_val.shape[0]),
        }
        return self.lr, self.steps
