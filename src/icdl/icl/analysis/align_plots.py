"""Plots of an alignment result ([`icdl.icl.analysis.align`][icdl.icl.analysis.align]): which algorithm the
ICL model runs.

* ``align.png`` — four panels against k: R² of each predictor as a prediction of the ICL model, the
  cosine of the label sensitivities ``d ŷ / d y_i``, of the query sensitivities ``d ŷ / d x_query``, and
  each predictor's own R² against the labels (for scale). Baselines are lines in the colours of
  [`icdl.icl.evaluation.plots.KIND_COLORS`][icdl.icl.evaluation.plots.KIND_COLORS]; GD on the target is its
  best grid point overall (solid) and the best point at each k (dotted, R² only); the compiled model is drawn
  as markers at its k values, against ICL (filled) and against the GD point it compiles (open, ~1).
* ``gd_grid.png`` — the GD grid: mean R² against ICL over k = 1..E for every (lr, L), one panel per
  initial scale.

Figures are ``matplotlib.figure.Figure`` objects (no pyplot, no backend set) written atomically.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from icdl.figure import subplots
from icdl.icl.evaluation.plots import COLORS, KIND_COLORS, save_figure

__all__ = ["plot_alignment", "plot_gd_grid", "plot_metrics"]

_PANELS = (
    ("r2", "R² of the predictor as a prediction of ICL"),
    ("cos_y", "cos(d ŷ/d y_i): context labels"),
    ("cos_x", "cos(d ŷ/d x_query)"),
    ("r2_truth", "R² against the labels"),
)
# Every predictor in its kind's colour (icdl.icl.evaluation.plots.KIND_COLORS), as in the evaluation plots.
_BASELINE_COLORS = KIND_COLORS
_GD_COLOR = KIND_COLORS["gd"]
_COMPILED_COLOR = KIND_COLORS["compiled"]


def _vals(xs: list[Any]) -> list[float]:
    return [math.nan if v is None else float(v) for v in xs]


def _panel(ax: Any, res: dict[str, Any], metric: str, title: str) -> None:
    ks, per = res["ks"], res["predictors"]
    shown = [n for n, e in per.items() if e["kind"] == "baseline"]
    for i, name in enumerate(shown):
        ax.plot(ks, _vals(per[name][metric]), "-", lw=1.4, color=_BASELINE_COLORS.get(name, COLORS[i]),
                label=name)  # fmt: skip
    best = (res.get("gd_best") or {}).get("overall")
    if best:
        ax.plot(ks, _vals(per[best][metric]), "-", lw=2.0, color=_GD_COLOR, label=f"GD {best[3:]}")
        if metric == "r2":
            ax.plot(
                ks, _vals(res["gd_best"]["r2_per_k"]), ":", lw=1.6, color=_GD_COLOR, label="GD, best per k"
            )
    if metric == "r2_truth":
        ax.plot(ks, _vals(per["icl"][metric]), "-", lw=2.2, color=KIND_COLORS["icl"], label="ICL")
    comp = res.get("compiled")
    if comp and metric != "r2_truth":
        cks = [row["k"] for row in comp["ks"]]
        ax.plot(cks, _vals([row["vs_icl"][metric] for row in comp["ks"]]), "D", color=_COMPILED_COLOR, ms=6,
                label="compiled vs ICL")  # fmt: skip
        ax.plot(cks, _vals([row["vs_gd"][metric] for row in comp["ks"]]), "o", mfc="white", ms=7,
                color=_COMPILED_COLOR, label="compiled vs its GD point")  # fmt: skip
    ax.axhline(1.0, ls="--", color="#404040", lw=0.8)
    ax.axhline(0.0, ls=":", color="#404040", lw=0.6)
    ax.axvline(res["run"]["train_examples"], ls="--", color="#808080", lw=0.8)
    ax.set_ylim(max(-0.5, ax.get_ylim()[0]), 1.05)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("In-context examples k")
    ax.grid(alpha=0.25)


def plot_metrics(res: dict[str, Any], path: str | Path) -> Path:
    """``align.png``: the four panels of the module docstring."""
    fig, axes = subplots(2, 2, figsize=(11, 8))
    fig.set_layout_engine("constrained")
    for ax, (metric, title) in zip(axes.flat, _PANELS, strict=True):
        _panel(ax, res, metric, title)
    handles: dict[str, Any] = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=5, fontsize=8)
    run = res["run"]
    fig.suptitle(f"Which algorithm does the ICL model run? {run['name']} (seed {run['train_seed']}, "
                 f"step {res['checkpoint']['step']}), {res['test']['prompts']} test prompts",
                 fontsize=10)  # fmt: skip
    return save_figure(fig, path)


def plot_gd_grid(res: dict[str, Any], path: str | Path) -> Path:
    """``gd_grid.png``: mean R² against ICL over the first k range for each (lr, L), per initial scale."""
    opts, per = res["options"], res["predictors"]
    lrs, steps, inits = opts["gd_lrs"], opts["gd_steps"], opts["gd_inits"]
    rng = "{}-{}".format(*res["ranges"][0])
    fig, axes = subplots(1, len(inits), figsize=(4.2 * len(inits), 3.6), squeeze=False)
    for ax, init in zip(axes[0], inits, strict=True):
        grid = [[per[f"gd_lr{lr:g}_L{L}_init{init:g}"]["ranges"][rng]["r2"] for lr in lrs] for L in steps]
        grid = [[math.nan if v is None else v for v in row] for row in grid]
        im = ax.imshow(grid, vmin=-0.5, vmax=1.0, cmap="viridis", aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                dark = not math.isfinite(v) or v < 0.4
                text = "–" if not math.isfinite(v) else ("<-1" if v < -1 else f"{v:.2f}")
                ax.text(
                    j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black",
                    clip_on=True,
                )  # fmt: skip
        ax.set_xticks(range(len(lrs)), [f"{v:g}" for v in lrs])
        ax.set_yticks(range(len(steps)), [str(v) for v in steps])
        ax.set_xlabel("GD step size")
        ax.set_ylabel("GD steps L")
        ax.set_title(f"init scale {init:g} × He: R² vs ICL, k = {rng}", fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    return save_figure(fig, path)


def plot_alignment(res: dict[str, Any], folder: str | Path) -> list[Path]:
    """Write ``align.png`` and (when the result has a GD grid) ``gd_grid.png`` into ``folder``."""
    folder = Path(folder)
    paths = [plot_metrics(res, folder / "align.png")]
    if res.get("gd_best"):
        paths.append(plot_gd_grid(res, folder / "gd_grid.png"))
    return paths
