"""``blup``: the best predictor LINEAR in the context labels for any task the sampler can draw (issue 27).

For a prompt's points ``x_0..x_T`` the predictor ``ŷ_k = c_kᵀ y_{<k}`` with the lowest expected squared
error over the task distribution has ``c_k = M[:k, :k]⁻¹ M[:k, k]``, ``M(x, x') = E_task[y(x) y(x')]`` the
labels' second moment (conditional on the inputs; the best linear unbiased predictor of kriging when the
mean is 0, as it is for bias-free targets and for standardised labels). `TaskSecondMoment` estimates ``M``
by Monte Carlo over ``targets`` tasks drawn by the task sampler ITSELF
([`icdl.icl.tasks.sample_batch`][icdl.icl.tasks.sample_batch]: the task's weights — any mean, std, depth,
width, activation, output layer — and, with ``standardize: task``, each target's own reference inputs,
shift and scale), so it is right by construction for every task option, with Monte Carlo error
``O(1/√targets)`` instead of a modelling assumption. `BlupBaseline` is kernel ridge with that moment, λ
per k tuned on held-out prompts (λ ≈ the label noise variance; → 0 without noise).

Limits: the moment is the marginal one — a per-prompt mixture component is averaged over, not inferred
from the prompt's own inputs — and the predictor is linear in the labels (a Bayes posterior mean is not).

Cost (recorded in ``cost``): ``targets`` forward passes of the target network at every prompt point,
``2 · targets · B · T · Σ_j n_{j-1} n_j`` flops, plus ``targets · B · T²`` for the moment; about a minute
per 1,000 prompts of 46 points with 2,048 width-64 targets on one CPU thread.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.icl.kernels import TunedKernelRidge
from icdl.nets import forward

if TYPE_CHECKING:
    from icdl.config import TaskConfig

__all__ = ["BLUP_SEED", "DEFAULT_TARGETS", "BlupBaseline", "TaskSecondMoment"]

BLUP_SEED = 27_028  # the targets' sampler seed: never a training or evaluation seed
DEFAULT_TARGETS = 2048
_CHUNK_ELEMENTS = 2**23  # target-chunk x points x width intermediates
_PROMPT_CHUNK = 32


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
            from icdl.icl.tasks import sample_batch

            pb = sample_batch(self.task, self.targets, seed=self.seed, step=0, points=1)
            self._cache.update(w=pb.w, shift=pb.label_shift, scale=pb.label_scale)
        return self._cache["w"], self._cache["shift"], self._cache["scale"]

    def labels(self, x: Tensor) -> Tensor:
        """``y_m(x)`` for every target and every row of ``x (N, d)``: ``(M, N, d_y)`` float64."""
        from icdl.icl.tasks import net_spec

        w, shift, scale = self.draws()
        spec = net_spec(self.task)
        per = max(1, _CHUNK_ELEMENTS // max(1, x.shape[0] * max(self.task.width, self.task.dim)))
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
        for s in range(0, B, _PROMPT_CHUNK):
            c = slice(s, min(s + _PROMPT_CHUNK, B))
            y = self.labels(xs[c].reshape(-1, d)).reshape(self.targets, c.stop - c.start, T, -1)
            K[c] = torch.einsum("mbto,mbso->bts", y, y) / (self.targets * y.shape[-1])
        self.seconds += time.perf_counter() - t0
        self.points += B * T
        return K

    def cost(self) -> dict[str, Any]:
        """Seconds spent in `gram`, the points it labelled and the forward flops that took."""
        from icdl.icl.tasks import net_spec

        spec = net_spec(self.task)
        macs = sum(math.prod(s) for s in spec.shapes)
        return {
            "targets": self.targets,
            "seed": self.seed,
            "seconds": self.seconds,
            "points": self.points,
            "forward_flops": 2 * macs * self.targets * self.points,
        }


@dataclass
class BlupBaseline(TunedKernelRidge):
    """``blup``: kernel ridge with the task sampler's Monte Carlo label moment
    ([`TaskSecondMoment`][icdl.icl.blup.TaskSecondMoment]) — the best linear-in-labels predictor up to
    Monte Carlo error; λ per k tuned on held-out prompts (module docstring)."""

    moment: TaskSecondMoment | None = None

    @classmethod
    def for_task(cls, task: TaskConfig, *, targets: int = DEFAULT_TARGETS, **options: Any) -> BlupBaseline:
        return cls(moment=TaskSecondMoment(task, targets=targets), **options)

    @property
    def name(self) -> str:
        return "blup"

    def gram(self, xs: Tensor) -> Tensor:
        if self.moment is None:
            raise InputError("blup needs the task's moment (use BlupBaseline.for_task)")
        return self.moment.gram(xs)
