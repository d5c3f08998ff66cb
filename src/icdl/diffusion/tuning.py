"""Score baselines tuned on held-out prompts: a grid of candidates, one choice per (k, noise level) cell.

A tuned baseline is a family of causal score estimators (a grid over their hyperparameters) and a
table that picks one candidate per cell of (number of context examples k, diffusion time t of the query).
The table is chosen on *held-out* prompts only: fresh prompts of the task drawn from ``seed``, which must
differ from the test prompts' seed, by the h-weighted score error against the exact score
([`icdl.diffusion.metrics.score_error`][icdl.diffusion.metrics.score_error]'s quantity). The result stays
causal: the prediction at point j uses the pairs ``i < j``, and the cell only depends on j and the
query's own t.

* [`tune`][icdl.diffusion.tuning.tune] — evaluate every candidate on the held-out prompts and fill the table
  ([`select`][icdl.diffusion.tuning.select]).
* [`TunedScore`][icdl.diffusion.tuning.TunedScore] — the tuned estimator (``__call__`` on prompts,
  ``score_fn`` for the samplers, ``report()`` for the JSON: the chosen hyperparameters per cell).
* [`tuned_baselines`][icdl.diffusion.tuning.tuned_baselines] — the three families of docs/score.md:
  ``gd_prior`` (GD on the paper's bias-free score network from the start that outputs the prior ``-x``,
  lr and steps tuned, per k), ``kde`` (Gaussian KDE, bandwidth per k and t) and ``mixture_fit`` (the task's
  mixture family fitted by MAP-EM, components and spread per k and t).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from icdl.diffusion.baselines import GDScore, ScoreFn
from icdl.diffusion.config import ScoreConfig
from icdl.diffusion.density import KDEScore, MixtureFitScore, PopulationScore
from icdl.diffusion.task import ou_h, sample_score_batch
from icdl.errors import InputError

__all__ = [
    "BASELINES",
    "K_EDGES",
    "Candidate",
    "Selection",
    "TunedScore",
    "select",
    "tune",
    "tuned_baselines",
]

K_EDGES = (0, 1, 2, 4, 8, 16, 32)  # lower edges of the k bins: {0}, {1}, {2, 3}, {4..7}, ...
BASELINES = ("gd_prior", "kde", "mixture_fit")


class Candidate(Protocol):
    """A causal score estimator with named hyperparameters and a per-context score function."""

    @property
    def name(self) -> str: ...

    @property
    def params(self) -> dict[str, Any]: ...

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor: ...

    def score_fn(self, ctx_xs: Tensor, ctx_ys: Tensor) -> ScoreFn: ...


@dataclass(frozen=True)
class Selection:
    """The table ``choice[k_bin][t_bin]`` of candidate indices.

    ``k_edges``: lower edges of the k bins (the first is 0); ``t_edges``: the interior edges of the t bins
    (empty: one bin).
    """

    k_edges: tuple[int, ...]
    t_edges: tuple[float, ...]
    choice: tuple[tuple[int, ...], ...]

    def k_bin(self, k: int) -> int:
        return bisect.bisect_right(self.k_edges, k) - 1

    def t_bin(self, t: Tensor) -> Tensor:
        """The t bin of every entry of ``t`` (long tensor of its shape)."""
        edges = torch.tensor(self.t_edges, dtype=t.dtype, device=t.device)
        return torch.bucketize(t.contiguous(), edges, right=True)

    def table(self) -> Tensor:
        return torch.tensor(self.choice, dtype=torch.long)


def _cell_errors(err: Tensor, cells: Tensor, evaluated: Tensor, n_cells: int) -> Tensor:
    """Mean of ``err (C, B, n)`` per cell: ``(C, n_cells)``; NaN for a cell without evaluated points."""
    flat = cells.masked_fill(~evaluated, n_cells).reshape(-1)  # unevaluated points go to a dump cell
    total = torch.zeros(err.shape[0], n_cells + 1, dtype=err.dtype).index_add_(
        1, flat, err.reshape(err.shape[0], -1)
    )
    count = torch.zeros(n_cells + 1, dtype=err.dtype).index_add_(
        0, flat, torch.ones_like(flat, dtype=err.dtype)
    )
    return (total / count)[:, :n_cells]


def select(
    preds: Sequence[Tensor],
    exact: Tensor,
    t: Tensor,
    *,
    k_edges: Sequence[int] = K_EDGES,
    t_edges: Sequence[float] = (),
) -> Selection:
    """Choose, per (k bin, t bin), the candidate with the lowest mean h-weighted squared score error.

    ``preds``: each candidate's predictions ``(B, n, d)`` on held-out prompts (NaN where a candidate was
    not evaluated, e.g. GD off its ``ks``; a non-finite prediction at an evaluated point counts as an
    infinite error). ``exact (B, n, d)``, ``t (B, n)``. A cell without held-out points takes the choice of
    its k bin over all t, and a k bin without points the overall best.
    """
    if not preds:
        raise InputError("nothing to tune: no candidates")
    n = t.shape[1]
    evaluated = torch.stack([p.isnan().all(-1).all(0) for p in preds]).logical_not().any(0)  # (n,)
    err = torch.stack([(ou_h(t)[..., None] * (p - exact) ** 2).sum(-1) for p in preds])  # (C, B, n)
    err = torch.where(err.isfinite(), err, math.inf)
    sel = Selection(tuple(k_edges), tuple(t_edges), ())
    kb = torch.tensor([sel.k_bin(j) for j in range(n)])[None].expand_as(t)
    tb = sel.t_bin(t)
    n_t = len(t_edges) + 1
    mask = evaluated[None].expand_as(t)
    per_cell = _cell_errors(err, kb * n_t + tb, mask, len(k_edges) * n_t).reshape(-1, len(k_edges), n_t)
    per_k = _cell_errors(err, kb, mask, len(k_edges))  # (C, K)
    overall = int(_cell_errors(err, torch.zeros_like(kb), mask, 1)[:, 0].argmin())
    choice = []
    for a in range(len(k_edges)):
        row_best = overall if per_k[:, a].isnan().all() else int(per_k[:, a].argmin())
        row = [
            row_best if per_cell[:, a, b].isnan().all() else int(per_cell[:, a, b].argmin())
            for b in range(n_t)
        ]
        choice.append(tuple(row))
    return Selection(tuple(k_edges), tuple(t_edges), tuple(choice))


@dataclass
class TunedScore:
    """A candidate per (k, t) cell, chosen on held-out prompts by [`tune`][icdl.diffusion.tuning.tune]."""

    name: str
    candidates: Sequence[Candidate]
    selection: Selection
    heldout: dict[str, Any] = field(default_factory=dict)

    def used(self) -> list[int]:
        return sorted({c for row in self.selection.choice for c in row})

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        n = xs.shape[1]
        sel = self.selection
        idx = sel.table()[
            torch.tensor([sel.k_bin(j) for j in range(n)])[None], sel.t_bin(xs[..., -1])
        ]  # (B, n)
        out = torch.full_like(ys, math.nan)
        for c in self.used():
            out = torch.where((idx == c)[..., None], self.candidates[c](xs, ys), out)
        return out

    def score_fn(self, ctx_xs: Tensor, ctx_ys: Tensor) -> ScoreFn:
        """The score function of one context: the choice of its k bin, then of each query's t bin."""
        row = self.selection.choice[self.selection.k_bin(ctx_xs.shape[0])]
        fns = {c: self.candidates[c].score_fn(ctx_xs, ctx_ys) for c in set(row)}

        def fn(x: Tensor, t: float) -> Tensor:
            return fns[row[int(self.selection.t_bin(torch.tensor(t)))]](x, t)

        return fn

    def report(self) -> dict[str, Any]:
        """JSON-ready: the bins, the grid and the chosen hyperparameters per cell."""
        sel = self.selection
        return {
            "heldout": self.heldout,
            "k_edges": list(sel.k_edges),
            "t_edges": list(sel.t_edges),
            "grid": [c.params for c in self.candidates],
            "chosen": [[self.candidates[c].params for c in row] for row in sel.choice],
        }


def tune(
    name: str,
    candidates: Sequence[Candidate],
    cfg: ScoreConfig,
    *,
    prompts: int,
    seed: int,
    test_seed: int | None = None,
    t_bins: int = 1,
    k_edges: Sequence[int] = K_EDGES,
) -> TunedScore:
    """Tune on ``prompts`` held-out prompts of ``cfg.task`` drawn from ``seed`` (never the test prompts:
    ``seed == test_seed`` is refused). ``t_bins`` log-spaced bins of ``[t_min, t_max]``."""
    if test_seed is not None and seed == test_seed:
        raise InputError(f"the tuning seed must differ from the test prompts' seed, both are {seed}")
    if prompts < 2 or t_bins < 1:
        raise InputError(f"need >= 2 tuning prompts and >= 1 t bin, got {prompts} and {t_bins}")
    task = cfg.task
    lo, hi = math.log(task.t_min), math.log(task.t_max)
    t_edges = tuple(math.exp(lo + (hi - lo) * i / t_bins) for i in range(1, t_bins))
    b = sample_score_batch(task, prompts, seed=seed, dtype=torch.float64)
    with torch.no_grad():
        preds = [c(b.xs, b.ys) for c in candidates]
    sel = select(preds, b.exact_score(), b.t, k_edges=k_edges, t_edges=t_edges)
    return TunedScore(name, list(candidates), sel, {"prompts": prompts, "seed": seed})


def _families(
    cfg: ScoreConfig, gd_ks: Sequence[int] | None, gd_width: int
) -> dict[str, Callable[[], list[Any]]]:
    task = cfg.task
    s, m0 = task.component_std, task.components
    pop = PopulationScore.for_task(task)
    return {
        "gd_prior": lambda: [
            GDScore(depth=3, width=gd_width, lr=lr, steps=steps, ks=gd_ks, init="prior", init_scale=scale)
            for scale in (0.3, 1.0)
            for lr in (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
            for steps in (10, 100)
        ],
        "kde": lambda: [
            pop,
            *(KDEScore(b) for b in (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8, 1.2, 1.6)),
        ],
        "mixture_fit": lambda: [
            pop,
            *(
                MixtureFitScore(
                    m, f * s, mean_scale=max(task.mean_scale, 1e-3), concentration=task.weight_concentration
                )
                for m in sorted({max(1, m0 - 1), m0, m0 + 1})
                for f in (1.0, 1.5, 2.25, 3.4)
            ),
        ],
    }


def tuned_baselines(
    cfg: ScoreConfig,
    names: Sequence[str] = BASELINES,
    *,
    prompts: int = 256,
    seed: int = 999,
    test_seed: int | None = None,
    gd_ks: Sequence[int] | None = None,
    gd_width: int = 16,
    t_bins: int = 4,
) -> list[TunedScore]:
    """The tuned baselines ``names`` (of ``BASELINES``), each tuned on the same held-out prompts.

    ``gd_prior``: free-unit scale in {0.3, 1} x lr in {3e-4, ..., 1e-1} (6 values) x steps in {10, 100},
    per k bin (one t bin: a GD fit is one network per context), evaluated only at ``gd_ks`` (it costs one
    GD run per k). ``kde``: 11 bandwidths in [0, 1.6], per k and t bin. ``mixture_fit``: components
    ``m - 1, m, m + 1`` x spread ``{1, 1.5, 2.25, 3.4} x component_std``, per k and t bin. ``kde`` and
    ``mixture_fit`` may also choose the task's population score
    ([`PopulationScore`][icdl.diffusion.density.PopulationScore]) in a cell.
    """
    fams = _families(cfg, gd_ks, gd_width)
    unknown = [n for n in names if n not in fams]
    if unknown:
        raise InputError(f"unknown score baseline(s) {', '.join(unknown)}; known: {', '.join(BASELINES)}")
    return [
        tune(
            n, fams[n](), cfg, prompts=prompts, seed=seed, test_seed=test_seed,
            t_bins=1 if n == "gd_prior" else t_bins,
        )
        for n in names
    ]  # fmt: skip
