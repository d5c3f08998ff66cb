"""The Monte Carlo second moment of a task sampler's labels
([`TaskSecondMoment`][icdl.icl.baselines.moment.TaskSecondMoment]): the covariance a linear-in-labels
predictor needs, for any task ``sample_batch`` can draw (finite width,
shifted weights, standardised labels, mixtures), estimated from the sampler itself (issue 27). Used by
``blup`` ([`icdl.icl.baselines.blup`][icdl.icl.baselines.blup]) and, where no NNGP limit exists, by
``kernel`` ([`icdl.icl.baselines.kernel`][icdl.icl.baselines.kernel])."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from icdl.config import TaskConfig
from icdl.errors import InputError
from icdl.icl.tasks import net_spec, sample_batch
from icdl.nets import forward

__all__ = ["BLUP_SEED", "DEFAULT_TARGETS", "TaskSecondMoment"]

BLUP_SEED = 27_028  # the targets' sampler seed: never a training or evaluation seed
DEFAULT_TARGETS = 2048
CHUNK_ELEMENTS = 2**23  # target-chunk x points x width intermediates
PROMPT_CHUNK = 32


@dataclass
class TaskSecondMoment:
    """Monte Carlo second moment ``M(x, x') = (1 / (targets · d_y)) Σ_m Σ_o y_mo(x) y_mo(x')`` of the labels
    of ``targets`` tasks drawn by ``sample_batch(task, targets, seed=seed)``: ``y_m(x) = (f(w_m, x) -
    shift_m) / scale_m`` with the sampler's own per-task shift and scale (0 and 1 unless ``standardize:
    task``). Label noise is not part of ``M`` (it adds ``noise_std²`` on the diagonal of the context block:
    the λ of kernel ridge). Output coordinates are exchangeable, so their moments are averaged."""

    task: TaskConfig
    targets: int = DEFAULT_TARGETS
    seed: int = BLUP_SEED
    seconds: float = 0.0
    points: int = 0
    _cache: dict[str, Tensor] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.targets, int) or isinstance(self.targets, bool) or self.targets < 2:
            raise InputError(f"blup targets must be an integer >= 2, got {self.targets!r}")

    def draws(self) -> tuple[Tensor, Tensor, Tensor]:
        """The targets' ``(w (M, P), shift (M, 1, d_y), scale (M, 1, d_y))``, drawn once by the sampler."""
        if not self._cache:
            pb = sample_batch(self.task, self.targets, seed=self.seed, step=0, points=1)
            self._cache.update(w=pb.w, shift=pb.label_shift, scale=pb.label_scale)
        return self._cache["w"], self._cache["shift"], self._cache["scale"]

    def labels(self, x: Tensor) -> Tensor:
        """``y_m(x)`` for every target and every row of ``x (N, d)``: ``(M, N, d_y)`` float64."""
        w, shift, scale = self.draws()
        spec = net_spec(self.task)
        per = max(1, CHUNK_ELEMENTS // max(1, x.shape[0] * max(self.task.width, self.task.dim)))
        x32 = x.to(w.dtype)
        out = [
            ((forward(spec, w[s : s + per], x32[None]) - shift[s : s + per]) / scale[s : s + per]).double()
            for s in range(0, w.shape[0], per)
        ]
        return torch.cat(out)

    def gram(self, xs: Tensor) -> Tensor:
        """``M`` between the points of each prompt of ``xs (B, T, d)``: ``(B, T, T)`` float64."""
        t0 = time.perf_counter()
        B, T, d = xs.shape
        K = torch.empty((B, T, T), dtype=torch.float64, device=xs.device)
        for s in range(0, B, PROMPT_CHUNK):
            c = slice(s, min(s + PROMPT_CHUNK, B))
            y = self.labels(xs[c].reshape(-1, d)).reshape(self.targets, c.stop - c.start, T, -1)
            K[c] = torch.einsum("mbto,mbso->bts", y, y) / (self.targets * y.shape[-1])
        self.seconds += time.perf_counter() - t0
        self.points += B * T
        return K

    def cost(self) -> dict[str, Any]:
        """Seconds spent in `gram`, the points it labelled and the forward flops that took."""
        spec = net_spec(self.task)
        macs = sum(math.prod(s) for s in spec.shapes)
        return {
            "targets": self.targets,
            "seed": self.seed,
            "seconds": self.seconds,
            "points": self.points,
            "forward_flops": 2 * macs * self.targets * self.points,
        }
