"""Pictures of what a model computes: residual-stream heatmaps, head patterns, slot trajectories.

Every function returns a ``matplotlib.figure.Figure`` built without pyplot (no display needed, the
caller's backend untouched), an [`IcdlFigure`][icdl.figure.IcdlFigure] that any Jupyter kernel shows inline,
without ``%matplotlib inline``; save it with
[`icdl.figure.save_figure`][icdl.figure.save_figure] (re-exported here; any dpi, PNG/PDF/SVG from the file
suffix)
or ``fig.savefig``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.figure import FIGURE_FORMATS, save_figure, subplots

__all__ = [
    "FIGURE_FORMATS",
    "plot_block_map",
    "plot_head_pattern",
    "plot_residual",
    "plot_slot_trajectory",
    "save_figure",
]


def _as_2d(t: Tensor, batch: int) -> Tensor:
    if t.dim() == 3:
        t = t[batch]
    if t.dim() != 2:
        raise InputError(f"expected a (B, T, D) or (T, D) tensor, got shape {tuple(t.shape)}")
    return t.detach().to("cpu", torch.float64)


def plot_residual(
    H: Tensor,
    layout: Any = None,
    *,
    batch: int = 0,
    title: str = "",
    token_labels: Sequence[str] | None = None,
    linthresh: float = 1e-3,
) -> Any:
    """The residual stream as a token x slot heatmap (one row per token, one column per coordinate).

    Args:
        H: ``(B, T, D)`` (``batch`` picks one prompt) or ``(T, D)``.
        layout: an [`icdl.construct.engine.layout.Layout`][icdl.construct.engine.layout.Layout] (slot names on
            the x axis, a line between slots), or ``None`` for bare coordinates (e.g. a trained model's
        ``d_model`` stream). token_labels: one label per token (default ``1 .. n`` and ``query`` when a layout
        is given). linthresh: the colour scale is symmetric-log, linear within ``±linthresh``: the
            construction holds values from 1e-16 (round-off) to its gate constant 1e6 side by side.

    Returns the ``Figure``.
    """
    from matplotlib.colors import SymLogNorm

    A = _as_2d(H, batch)
    T, D = A.shape
    if layout is not None and layout.dim != D:
        raise InputError(f"layout has {layout.dim} coordinates, the stream {D}")
    if token_labels is None:
        token_labels = [str(i + 1) for i in range(T - 1)] + ["query"] if layout is not None else None
    vmax = max(float(A.abs().max()), linthresh)
    fig, ax = subplots(figsize=(min(16, 3 + D * 0.03 + 2), min(10, 1.5 + T * 0.12 + 1)))
    im = ax.imshow(
        A.numpy(), aspect="auto", cmap="RdBu_r", interpolation="nearest",
        norm=SymLogNorm(linthresh=linthresh, vmin=-vmax, vmax=vmax),
    )  # fmt: skip
    if layout is not None:
        centres, names = [], []
        for s in layout.slots:
            centres.append(s.offset + (s.size - 1) / 2)
            names.append(s.label)
            if s.offset:
                ax.axvline(s.offset - 0.5, color="k", lw=0.5)
        ax.set_xticks(centres, names, rotation=90, fontsize=8)
        ax.set_xlabel("slot")
    else:
        ax.set_xlabel("coordinate")
    if token_labels is not None:
        step = max(1, T // 24)
        ax.set_yticks(range(0, T, step), [token_labels[i] for i in range(0, T, step)], fontsize=8)
    ax.set_ylabel("token")
    ax.set_title(title or "residual stream")
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01)
    fig.tight_layout()
    return fig


def plot_head_pattern(
    pattern: Tensor, *, batch: int = 0, title: str = "", token_labels: Sequence[str] | None = None
) -> Any:
    """One head's attention weights as a query x key heatmap.

    Args:
        pattern: ``(B, T_query, T_key)`` (``batch`` picks one prompt) or ``(T_query, T_key)``, e.g.
            [`icdl.inspect.head_pattern`][icdl.inspect.compiled.head_pattern] or a trained model's
            ``cache[block, "attn.pattern"][:, head]``.
    """
    P = _as_2d(pattern, batch)
    Tq, Tk = P.shape
    fig, ax = subplots(figsize=(min(9, 2.5 + Tk * 0.1), min(8, 2 + Tq * 0.1)))
    lim = max(float(P.abs().max()), 1e-12)
    signed = bool((P < 0).any())
    im = ax.imshow(
        P.numpy(), cmap="RdBu_r" if signed else "viridis", vmin=-lim if signed else 0.0, vmax=lim,
        interpolation="nearest",
    )  # fmt: skip
    ax.set_xlabel("key token")
    ax.set_ylabel("query token")
    if token_labels is not None:
        step = max(1, max(Tq, Tk) // 24)
        xt = range(0, Tk, step)
        ax.set_xticks(xt, [token_labels[i] for i in xt], fontsize=7, rotation=90)
        ax.set_yticks(range(0, Tq, step), [token_labels[i] for i in range(0, Tq, step)], fontsize=7)
    ax.set_title(title or "head pattern")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
    fig.tight_layout()
    return fig


def plot_slot_trajectory(
    traj: Tensor,
    reference: Tensor | None = None,
    *,
    batch: int = 0,
    coords: Sequence[int] | None = None,
    title: str = "",
) -> Any:
    """A slot's coordinates over the GD steps (lines) next to reference GD (markers), and their gap.

    Args:
        traj: ``(L+1, B, width)`` ([`icdl.inspect.slot_trajectory`][icdl.inspect.compiled.slot_trajectory]) or
            ``(L+1, width)``.
        reference: the same shape or ``(L+1, width)`` (e.g.
            [`icdl.nets.reference_gd`][icdl.nets.reference_gd]), optional.
        coords: which coordinates to draw (default the first 8).
    """

    def two(t: Tensor) -> Tensor:
        t = t.detach().to("cpu", torch.float64)
        return t[:, batch] if t.dim() == 3 else t

    A = two(traj)
    R = None if reference is None else two(reference)
    if R is not None and R.shape != A.shape:
        raise InputError(f"trajectory {tuple(A.shape)} and reference {tuple(R.shape)} differ in shape")
    cs = list(coords) if coords is not None else list(range(min(8, A.shape[1])))
    steps = range(A.shape[0])
    ncols = 2 if R is not None else 1
    fig, axes = subplots(1, ncols, figsize=(5.5 * ncols, 3.6), squeeze=False)
    ax = axes[0, 0]
    for i, c in enumerate(cs):
        color = f"C{i % 10}"
        ax.plot(steps, A[:, c].numpy(), "-", color=color, lw=1.5, label=f"[{c}]" if i < 8 else None)
        if R is not None:
            ax.plot(steps, R[:, c].numpy(), "o", color=color, ms=4, mfc="none")
    ax.set_xlabel("GD step")
    ax.set_ylabel("value")
    ax.set_title(title or "slot trajectory (lines: transformer, circles: reference GD)")
    # below the panel, off the data (the gap panel sits to its right)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    if R is not None:
        # An exact construction gives a gap of 0: draw it at 1e-18, below float64 round-off.
        gap = (A - R).abs().amax(dim=1).clamp_min(1e-18)
        axes[0, 1].semilogy(steps, gap.numpy(), "k.-")
        axes[0, 1].set_xlabel("GD step")
        axes[0, 1].set_ylabel("max |transformer - reference|")
        axes[0, 1].set_title("gap to reference GD (0 drawn at 1e-18)")
    for a in axes[0]:
        a.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    return fig


def plot_block_map(names: Sequence[str], slots: Sequence[str], usage: Tensor, *, title: str = "") -> Any:
    """How one GD step maps onto its sublayers: a sublayer x slot grid, read / write / read+write.

    Args:
        names, slots, usage: the output of
            [`icdl.inspect.compiled.slot_usage`][icdl.inspect.compiled.slot_usage].
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    U = usage.to("cpu").numpy()
    colors = ["#ffffff", "#6baed6", "#e6550d", "#8c6bb1"]  # none, read, write, read+write
    fig, ax = subplots(figsize=(1.2 + 0.55 * len(slots), 1.0 + 0.38 * len(names)))
    ax.imshow(U, cmap=ListedColormap(colors), vmin=-0.5, vmax=3.5, aspect="auto")
    ax.set_xticks(range(len(slots)), list(slots), rotation=90, fontsize=8)
    ax.set_yticks(range(len(names)), list(names), fontsize=8)
    ax.set_xticks([x - 0.5 for x in range(1, len(slots))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(names))], minor=True)
    ax.grid(which="minor", color="#cccccc", lw=0.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("slot")
    ax.set_ylabel("sublayer (execution order)")
    labels = ("reads", "writes", "reads and writes")
    ax.legend(
        handles=[Patch(color=c, label=lab) for c, lab in zip(colors[1:], labels, strict=True)],
        loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
    )  # fmt: skip
    ax.set_title(title or "one GD step: which sublayer reads and writes which slot", fontsize=10)
    fig.tight_layout()
    return fig
