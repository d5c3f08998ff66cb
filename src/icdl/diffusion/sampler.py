"""Reverse-time samplers for the OU forward process, driven by any score function.

Forward: ``dx = -x/2 dt + dW`` (so ``x_t = alpha_t x_0 + sqrt(h_t) z``). Song et al. 2021 give

* the probability-flow ODE ``dx/dt = -x/2 - s(x, t)/2`` (same marginals, deterministic), integrated
  from ``t_max`` down to ``t_min`` with Heun's method;
* the reverse SDE ``dx = [-x/2 - s(x, t)] dt + dW̄`` backwards in time, by Euler-Maruyama.

Both start from ``N(0, I)`` (the stationary law; ``p_{t_max}`` is close to it for large ``t_max``) and
end with one Tweedie step ``x_0 ≈ (x + h s(x, t_min)) / alpha`` (the posterior mean of ``x_0``), which
removes the ``sqrt(h_{t_min})`` blur left at ``t_min``. Time steps are uniform in ``log t``.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from icdl.diffusion.baselines import ScoreFn
from icdl.errors import InputError

__all__ = ["Method", "sample", "time_grid"]

Method = Literal["ode", "sde"]


def time_grid(t_max: float, t_min: float, steps: int) -> list[float]:
    """``steps + 1`` times from ``t_max`` down to ``t_min``, uniform in log t."""
    if not (0 < t_min < t_max) or steps < 1:
        raise InputError(f"need 0 < t_min < t_max and steps >= 1, got {t_min}, {t_max}, {steps}")
    return [float(v) for v in np.exp(np.linspace(math.log(t_max), math.log(t_min), steps + 1))]


def sample(
    score: ScoreFn,
    num: int,
    dim: int,
    *,
    t_max: float,
    t_min: float,
    steps: int = 100,
    method: Method = "ode",
    denoise: bool = True,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Draw ``num`` samples ``(num, dim)`` by integrating the reverse process with ``score(x, t)``."""
    if method not in ("ode", "sde"):
        raise InputError(f"method must be 'ode' or 'sde', got {method!r}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num, dim, generator=g, dtype=torch.float64).to(dtype)
    ts = time_grid(t_max, t_min, steps)

    def drift(x: Tensor, t: float, ode: bool) -> Tensor:
        s = score(x, t)
        return -x / 2 - (s / 2 if ode else s)  # forward-time drift of the reverse dynamics

    for t, t_next in itertools.pairwise(ts):
        dt = t - t_next  # > 0: we step backwards in time
        if method == "ode":
            d1 = drift(x, t, True)
            x_pred = x - dt * d1
            x = x - dt * 0.5 * (d1 + drift(x_pred, t_next, True))
        else:
            noise = torch.randn(num, dim, generator=g, dtype=torch.float64).to(dtype)
            x = x - dt * drift(x, t, False) + math.sqrt(dt) * noise
    if denoise:
        t = ts[-1]
        x = (x - math.expm1(-t) * score(x, t)) / math.exp(-t / 2)
    return x
