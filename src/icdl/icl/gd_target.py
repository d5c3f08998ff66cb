"""``gd_target``: gradient descent on the target architecture with step size AND step count tuned.

The algorithm the paper's construction compiles (L steps of GD on the bias-free N-layer network, eq.
2.2-2.3, [`icdl.nets.gradient`][icdl.nets.gradient]), run per prompt and k by
[`icdl.icl.baselines.GDBaseline`][icdl.icl.baselines.GDBaseline] from one seeded SMALL initialisation
(``init_std`` times He scaling, default 0.1), with the pair ``(lr, steps)`` chosen on HELD-OUT prompts
([`GDTargetBaseline.tune`][icdl.icl.gd_target.GDTargetBaseline.tune]): the best mean held-out MSE over k =
1..n-1. Slow (it loops over k and steps): tune on a few dozen prompts.
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
from icdl.icl.baselines import DEFAULT_LR_GRID, GDBaseline, check_prompts

__all__ = ["DEFAULT_STEPS_GRID", "GDTargetBaseline"]

DEFAULT_STEPS_GRID: tuple[int, ...] = (1, 3, 10, 30)


@dataclass
class GDTargetBaseline:
    """GD on ``spec`` from ``w0 ~ init_std · He`` (seeded), ``(lr, steps)`` tuned on held-out prompts.

    ``lr`` and ``steps`` may be given directly; otherwise `tune` sets them and records ``tuning =
    {"lr_grid", "steps_grid", "mse" (steps x lr, None where non-finite), "lr", "steps", "num_prompts"}``.
    """

    spec: nets.NetSpec
    lr_grid: Sequence[float] = DEFAULT_LR_GRID
    steps_grid: Sequence[int] = DEFAULT_STEPS_GRID
    init_std: float = 0.1
    seed: int = 0
    loss: str = "squared"
    lr: float | None = None
    steps: int | None = None
    tuning: dict[str, Any] | None = field(default=None)

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

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        if self.lr is None or self.steps is None:
            raise InputError("gd_target: lr and steps are not set; call tune() on held-out prompts")
        return self._gd(self.lr, self.steps)(xs, ys)

    def tune(self, xs_val: Tensor, ys_val: Tensor) -> tuple[float, int]:
        """Pick the grid pair with the lowest mean held-out MSE over k = 1..n-1 (non-finite = +inf)."""
        check_prompts(xs_val, ys_val)
        if xs_val.shape[1] < 2:
            raise InputError("tuning needs prompts with at least 2 points (k >= 1)")
        table = []
        with torch.no_grad():
            for steps in self.steps_grid:
                row = []
                for lr in self.lr_grid:
                    err = ((self._gd(lr, steps)(xs_val, ys_val) - ys_val) ** 2)[:, 1:].mean()
                    row.append(float(err) if bool(err.isfinite()) else math.inf)
                table.append(row)
        best = min(
            ((i, j) for i in range(len(table)) for j in range(len(table[0]))),
            key=lambda ij: table[ij[0]][ij[1]],
        )
        if not math.isfinite(table[best[0]][best[1]]):
            raise InputError("gd_target diverged for every (lr, steps) in the grid")
        self.steps, self.lr = int(self.steps_grid[best[0]]), float(self.lr_grid[best[1]])
        self.tuning = {
            "lr_grid": [float(v) for v in self.lr_grid],
            "steps_grid": [int(v) for v in self.steps_grid],
            "mse": [[v if math.isfinite(v) else None for v in row] for row in table],
            "lr": self.lr,
            "steps": self.steps,
            "num_prompts": int(xs_val.shape[0]),
        }
        return self.lr, self.steps
