"""The compiled GD transformer on a score network: in-context GD on the DSM loss (Theorem 1, d_x != d_y).

The score network is the paper's bias-free N-layer ReLU network (Definition 1) with a linear output
layer, input ``[x_t, t]`` (``d_x = d + 1``) and output the score (``d_y = d``): a score takes negative
values, which a ReLU output layer cannot produce. The paper's empirical risk with the squared loss,
``L_n(w) = (1/(2n)) Σ_i ||f(w, (x_t,i, t_i)) - y_i||^2`` (eq. 2.2), is half the (unweighted) DSM loss,
so the construction of Theorem 1 — used unchanged through the public [`icdl.construct`][icdl.construct] API —
runs GD on denoising score matching in its forward pass;
[`verify_score_gd`][icdl.diffusion.construct.verify_score_gd] checks it against reference GD
([`icdl.nets.reference_gd`][icdl.nets.reference_gd]).

Usage:

```python
model = compile_score_gd(dim=2, depth=3, width=8, lr=0.01, steps=5, n=16)
x, y, xq, w0 = score_gd_prompt(dim=2, depth=3, width=8, n=16, seed=0)
w5 = model.read_weights(model(model.build_prompt(x, y, xq, w0)))   # 5 GD steps on the DSM loss
```

A prompt on which GD never moves w (every hidden unit dead on every example: common for tiny networks)
proves nothing, so the prompt is redrawn until GD moves w, as for ``icdl construct``
([`icdl.construct.task.redraw_while_degenerate`][icdl.construct.task.redraw_while_degenerate]);
``nondegenerate=False`` keeps the seed's first draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from icdl.construct import CompiledModel, VerifyReport, compile_gd_transformer, verify
from icdl.construct.task import redraw_while_degenerate, task_is_degenerate
from icdl.diffusion.config import ScoreTaskConfig
from icdl.diffusion.task import sample_score_batch
from icdl.nets import NetSpec, init_weights

__all__ = [
    "ScorePrompt",
    "compile_score_gd",
    "score_gd_prompt",
    "score_gd_prompt_info",
    "score_net_spec",
    "verify_score_gd",
]


@dataclass(frozen=True)
class ScorePrompt:
    """A prompt drawn by [`score_gd_prompt_info`][icdl.diffusion.construct.score_gd_prompt_info]; ``draws``
    counts the draws it took (1 unless earlier draws were degenerate and redrawn)."""

    x: Tensor
    y: Tensor
    x_query: Tensor
    w0: Tensor
    draws: int

    def astuple(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return self.x, self.y, self.x_query, self.w0


def score_net_spec(dim: int, depth: int, width: int) -> NetSpec:
    """The score network ``[x_t, t] (d + 1) -> score (d)``: bias-free ReLU, linear output layer."""
    return NetSpec(depth, width, dim + 1, dim, activation="relu", output="linear")


def compile_score_gd(
    dim: int, depth: int, width: int, *, lr: float, steps: int, n: int, dtype: str = "float64"
) -> CompiledModel:
    """Compile ``steps`` GD steps of step size ``lr`` on the DSM (squared) loss of the score network."""
    return compile_gd_transformer(
        score_net_spec(dim, depth, width), loss="squared", lr=lr, steps=steps, n=n, dtype=dtype
    )


def score_gd_prompt_info(
    dim: int,
    depth: int,
    width: int,
    n: int,
    *,
    seed: int = 0,
    task: ScoreTaskConfig | None = None,
    dtype: torch.dtype = torch.float64,
    nondegenerate: bool = True,
) -> ScorePrompt:
    """A score-task prompt for the compiled model and the number of draws it took.

    Draw ``i`` (1-based): the n examples and the query are one prompt of ``task`` (default: the task's
    defaults with ``dim = latent_dim = dim``) at ``(seed, step = i - 1)``; ``w0`` is the ``i``-th He-scaled
    ``N(0, 2/fan_in)`` draw of a generator seeded with ``seed`` (the paper's ``w0 = 0`` is a fixed point of
    GD for bias-free ReLU networks). With ``nondegenerate`` (the default) draws that
    [`task_is_degenerate`][icdl.construct.task.task_is_degenerate] rejects are redrawn, so a seed whose first
    draw is good gives the prompt it gave before redrawing existed; ``nondegenerate=False`` keeps draw 1.
    Raises [`InputError`][icdl.errors.InputError] when no draw within
    ``icdl.construct.task.MAX_DRAWS`` (100) is non-degenerate.
    """
    task = task or ScoreTaskConfig(dim=dim, latent_dim=dim)
    spec = score_net_spec(task.dim, depth, width)
    g = torch.Generator().manual_seed(seed)

    def draw(i: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        b = sample_score_batch(task, 1, seed=seed, step=i - 1, points=n + 1, dtype=dtype)
        w0 = init_weights(spec, generator=g, fan_in_scaling=True, dtype=dtype)
        return b.xs[0, :n], b.ys[0, :n], b.xs[0, n], w0

    (x, y, xq, w0), draws = redraw_while_degenerate(
        draw,
        lambda p: task_is_degenerate(spec, "squared", p[0], p[1], p[3]),
        nondegenerate=nondegenerate,
        what=f"score prompt from seed {seed}",
    )
    return ScorePrompt(x, y, xq, w0, draws)


def score_gd_prompt(
    dim: int,
    depth: int,
    width: int,
    n: int,
    *,
    seed: int = 0,
    task: ScoreTaskConfig | None = None,
    dtype: torch.dtype = torch.float64,
    nondegenerate: bool = True,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A score-task prompt for the compiled model: ``(x (n, d+1), y (n, d), x_query (d+1,), w0 (P,))``.

    [`score_gd_prompt_info`][icdl.diffusion.construct.score_gd_prompt_info] without the draw count: by
    default redrawn until the first GD step moves ``w0`` (``nondegenerate=False``: the seed's first draw).
    """
    return score_gd_prompt_info(
        dim, depth, width, n, seed=seed, task=task, dtype=dtype, nondegenerate=nondegenerate
    ).astuple()


def verify_score_gd(
    model: CompiledModel, seed: int = 0, task: ScoreTaskConfig | None = None, *, nondegenerate: bool = True
) -> VerifyReport:
    """[`icdl.construct.check.verify`][icdl.construct.check.verify] of ``model`` on a score-task prompt from
    ``seed`` (redrawn while degenerate unless ``nondegenerate=False``)."""
    spec = model.spec
    prompt = score_gd_prompt_info(
        spec.out_dim, spec.depth, spec.width, model.n, seed=seed, task=task, nondegenerate=nondegenerate
    )
    return verify(model, *prompt.astuple())
