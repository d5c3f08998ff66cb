"""Random prompts for a network spec ([`sample_task`][icdl.construct.task.sample_task]), redrawn while
degenerate: a prompt on which GD never moves w proves nothing about a compiled GD transformer
(docs/construction.md, "Degenerate tasks")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.nets import NetSpec, forward, gradient, init_weights, project

__all__ = [
    "MAX_DRAWS",
    "SampledTask",
    "gd_is_degenerate",
    "redraw_while_degenerate",
    "sample_task",
    "sample_task_info",
    "task_is_degenerate",
]

T = TypeVar("T")


@dataclass(frozen=True)
class SampledTask:
    """A prompt drawn by [`sample_task_info`][icdl.construct.task.sample_task_info]; ``draws`` counts the
    draws it took (1 unless earlier draws were degenerate and redrawn). `astuple` gives
    [`sample_task`][icdl.construct.task.sample_task]'s 5-tuple."""

    x: Tensor
    y: Tensor
    x_query: Tensor
    w0: Tensor
    w_teacher: Tensor
    draws: int

    def astuple(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        return self.x, self.y, self.x_query, self.w0, self.w_teacher


#: Draws allowed before [`redraw_while_degenerate`][icdl.construct.task.redraw_while_degenerate] gives up on
#: finding a non-degenerate task.
MAX_DRAWS = 100


def gd_is_degenerate(
    spec: NetSpec,
    loss: str,
    x: Tensor,
    y: Tensor,
    w0: Tensor,
    *,
    lr: float = 1.0,
    steps: int = 1,
    box: float | None = None,
) -> bool:
    """The one definition of a degenerate GD task: along the projected reference GD trajectory
    ``w_l = Proj_W(w_{l-1} - lr ∇L_n(w_{l-1}))`` ([`icdl.nets.reference_gd`][icdl.nets.reference_gd]) no
    step's gradient moves w (``w - lr ∇L_n(w) == w`` exactly at every one of the ``steps`` steps), so GD's
    movement comes from the projection alone, or there is none. (For ReLU networks: every unit dead on every
    example.) Every comparison with such a GD is about the projection, not the gradient, so it proves
    nothing about the construction's gradient. Computed in float64; ``steps=0`` is never degenerate."""
    x, y, w = x.double(), y.double(), w0.double()
    for _ in range(steps):
        step = w - lr * gradient(spec, loss, w, x, y)
        if not torch.equal(step, w):
            return False
        w = project(step, box)
    return steps > 0


def task_is_degenerate(
    spec: NetSpec,
    loss: str,
    x: Tensor,
    y: Tensor,
    w0: Tensor,
    *,
    lr: float = 1.0,
    steps: int = 1,
    box: float | None = None,
) -> bool:
    """A draw the redraw rejects: GD on it is degenerate
    ([`gd_is_degenerate`][icdl.construct.task.gd_is_degenerate] with the same ``lr``, ``steps`` and
    ``box``: the definition `verify` uses for DEGENERATE), or it has two or more labels, all equal (a
    task that teaches nothing; `verify` still checks it, since GD moves w on it). One label is trivially
    "all equal"; it counts as degenerate only when GD is."""
    if y.shape[0] > 1 and bool((y == y[:1]).all()):
        return True
    return gd_is_degenerate(spec, loss, x, y, w0, lr=lr, steps=steps, box=box)


def redraw_while_degenerate(
    draw: Callable[[int], T],
    degenerate: Callable[[T], bool],
    *,
    nondegenerate: bool = True,
    what: str = "task",
) -> tuple[T, int]:
    """The first of ``draw(1), draw(2), ...`` that ``degenerate`` does not reject, and how many draws it took.

    The one redraw loop of every task the CLI verifies on (`sample_task_info`, and
    [`icdl.diffusion.construct.score_gd_prompt_info`][icdl.diffusion.construct.score_gd_prompt_info] for
    ``icdl score construct``): ``draw(i)`` makes the ``i``-th draw (1-based), so the first draw is what the
    seed gave before redrawing existed. ``nondegenerate=False`` returns ``draw(1)`` unchecked. Raises
    [`InputError`][icdl.errors.InputError] (a ``ValueError``; the CLI's one-line exit 2) after `MAX_DRAWS`
    degenerate draws; ``what`` names the task in that message.
    """
    for draws in range(1, MAX_DRAWS + 1):  # the module's MAX_DRAWS at call time
        task = draw(draws)
        if not nondegenerate or not degenerate(task):
            return task, draws
    raise InputError(
        f"no non-degenerate {what} in {MAX_DRAWS} draws (each had labels all equal or a GD run whose "
        "gradient never moves w); nondegenerate=False / --raw-task keeps the first draw"
    )


def sample_task_info(
    spec: NetSpec,
    n: int,
    *,
    seed: int = 0,
    loss: str = "squared",
    dtype: torch.dtype = torch.float64,
    w0_scale: float = 1.0,
    nondegenerate: bool = True,
    lr: float = 1.0,
    steps: int = 1,
    box: float | None = None,
) -> SampledTask:
    """A random prompt for ``spec`` and the number of draws it took (see
    [`sample_task`][icdl.construct.task.sample_task]).

    Drawn from ``seed`` in this order: a teacher network with He-scaled weights ``N(0, 2/fan_in)``; inputs
    ``x_1..x_n, x_query ~ N(0, I)``; ``w0`` like the teacher times ``w0_scale``. Labels ``y = f(w*, x)``; for
    the logistic loss ``y = ±1`` by the sign of ``f - median``. (The paper's ``w0 = 0`` is a fixed point for
    bias-free ReLU networks, so it is not the default.) With ``nondegenerate`` (the default) a draw that
    [`task_is_degenerate`][icdl.construct.task.task_is_degenerate] rejects is followed by a fresh one from the
    same generator, so the first non-degenerate draw of a seed is what earlier versions returned for it;
    ``nondegenerate=False`` keeps the first draw whatever it is; ``lr``, ``steps`` and ``box`` are the GD
    run the degeneracy is judged on (the CLI passes its own, so a draw it keeps is not DEGENERATE). Raises
    [`InputError`][icdl.errors.InputError] (a ``ValueError``) after `MAX_DRAWS` degenerate draws
    ([`redraw_while_degenerate`][icdl.construct.task.redraw_while_degenerate]).
    """
    g = torch.Generator().manual_seed(seed)

    def draw(_: int) -> tuple[Tensor, ...]:  # the next draw of the one generator
        w_star = init_weights(spec, generator=g, fan_in_scaling=True, dtype=torch.float64)
        x = torch.randn(n, spec.in_dim, generator=g, dtype=torch.float64)
        xq = torch.randn(spec.in_dim, generator=g, dtype=torch.float64)
        w0 = w0_scale * init_weights(spec, generator=g, fan_in_scaling=True, dtype=torch.float64)
        y = forward(spec, w_star, x)
        if loss == "logistic":
            y = torch.where(y >= y.median(dim=0).values, 1.0, -1.0).to(torch.float64)
        return x, y, xq, w0, w_star

    task, draws = redraw_while_degenerate(
        draw,
        lambda t: task_is_degenerate(spec, loss, t[0], t[1], t[3], lr=lr, steps=steps, box=box),
        nondegenerate=nondegenerate,
        what=f"task from seed {seed}",
    )
    c = [v.to(dtype) for v in task]
    return SampledTask(c[0], c[1], c[2], c[3], c[4], draws=draws)


def sample_task(
    spec: NetSpec,
    n: int,
    *,
    seed: int = 0,
    loss: str = "squared",
    dtype: torch.dtype = torch.float64,
    w0_scale: float = 1.0,
    nondegenerate: bool = True,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """A random prompt for ``spec``: ``(x (n, d_x), y (n, d_y), x_query (d_x,), w0 (P,), w_teacher (P,))``.

    [`sample_task_info`][icdl.construct.task.sample_task_info] without the draw count: by default redrawn
    until the labels are not all equal and the first GD step moves ``w0`` (``nondegenerate=False``: the seed's
    first draw as it is).
    """
    return sample_task_info(
        spec, n, seed=seed, loss=loss, dtype=dtype, w0_scale=w0_scale, nondegenerate=nondegenerate
    ).astuple()
