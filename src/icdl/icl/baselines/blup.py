"""``blup``: the best predictor LINEAR in the context labels for any task the sampler can draw (issue 27).

For a prompt's points ``x_0..x_T`` the predictor ``ŷ_k = c_kᵀ y_{<k}`` with the lowest expected squared
error over the task distribution has ``c_k = M[:k, :k]⁻¹ M[:k, k]``, ``M(x, x') = E_task[y(x) y(x')]`` the
labels' second moment (conditional on the inputs; the best linear unbiased predictor of kriging when the
mean is 0, as it is for bias-free targets and for standardised labels).
[`TaskSecondMoment`][icdl.icl.baselines.moment.TaskSecondMoment] estimates ``M``
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

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from icdl.config import TaskConfig
from icdl.errors import InputError
from icdl.icl.baselines.kernel import TunedKernelRidge
from icdl.icl.baselines.moment import BLUP_SEED, DEFAULT_TARGETS, TaskSecondMoment

__all__ = ["BLUP_SEED", "DEFAULT_TARGETS", "BlupBaseline", "TaskSecondMoment"]


@dataclass
class BlupBaseline(TunedKernelRidge):
    """``blup``: kernel ridge with the task sampler's Monte Carlo label moment
    ([`TaskSecondMoment`][icdl.icl.baselines.moment.TaskSecondMoment]) — the best linear-in-labels predictor
    up to
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
