"""PNG plots of evaluation results in the paper's style (Wu et al. App. F; Garg et al.'s ``basic_plot``).

R² against the number of in-context examples k, one curve per condition or predictor, the 90 % bootstrap
band shaded with alpha 0.3, a dashed line at R² = 1 and a dashed vertical line at the training prompt
length. matplotlib with the Agg backend (no display needed); every function writes one PNG atomically
and returns its path. The path's suffix picks the format (PNG, PDF or SVG); ``dpi`` sets the resolution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from icdl.errors import InputError
from icdl.io import atomic_write

__all__ = ["plot_conditions", "plot_depth_sweep", "plot_predictors"]

# The paper's colours for curves A-D (dark red, blue, orange, green) and its grey NN baseline.
COLORS = ("#8b0000", "#1f4e9c", "#ef8a17", "#2e8b57", "#7b3294", "#008080", "#b8860b", "#444444")
BASELINE_GREY = "#808080"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _finite(vals: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in vals]


def _draw(ax: Any, curve: dict[str, Any], label: str, color: str, style: str = "-") -> list[float]:
    """One R² curve with its band; NaN (unevaluated) positions are skipped, isolated points get markers."""
    ks = list(range(len(curve["r2"])))
    r2, lo, hi = _finite(curve["r2"]), _finite(curve["r2_low"]), _finite(curve["r2_high"])
    pts = [(k, a, b, c) for k, a, b, c in zip(ks, r2, lo, hi, strict=True) if math.isfinite(a)]
    if not pts:
        return []
    k_, a_, b_, c_ = (list(t) for t in zip(*pts, strict=True))
    sparse = len(pts) < len(ks) - 1  # a baseline evaluated at a few k only
    ax.plot(k_, a_, style, color=color, label=label, lw=1.6, marker="o" if sparse else None, ms=3)
    if all(math.isfinite(v) for v in b_ + c_):
        ax.fill_between(k_, b_, c_, color=color, alpha=0.3, lw=0)
    return a_


def _finish(ax: Any, values: list[float], train_examples: int, title: str) -> None:
    ax.axhline(1.0, ls="--", color="#404040", lw=1)
    ax.axvline(train_examples, ls="--", color="#404040", lw=1)
    finite = [v for v in values if math.isfinite(v)]
    low = min(finite, default=0.0)
    # Very negative R² (degenerate conditions) would flatten every other curve: clip, and say so.
    bottom = max(min(low, 0.0) - 0.05, -1.5)
    ax.set_ylim(bottom, 1.05)
    if low < bottom:
        title += f" (min R² {low:.3g} clipped)"
    ax.set_xlabel("In-context examples k")
    ax.set_ylabel("R²")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")


DEFAULT_DPI = 80
"""Resolution of the PNG reports (small files); pass ``dpi=`` or save as PDF/SVG for print."""

FORMATS = (".png", ".pdf", ".svg")


def _save(fig: Any, path: str | Path, dpi: int | None = None) -> Path:
    """Write ``fig`` atomically; the suffix of ``path`` (``.png``, ``.pdf``, ``.svg``) picks the format."""
    path = Path(path)
    fmt = path.suffix.lower()
    try:
        if fmt not in FORMATS:
            raise InputError(f"cannot write {str(path)!r}: figures are {', '.join(FORMATS)}")
        return atomic_write(
            path,
            lambda fh: fig.savefig(fh, format=fmt[1:], dpi=dpi or DEFAULT_DPI, bbox_inches="tight"),
            binary=True,
        )
    finally:
        _plt().close(fig)


def plot_conditions(
    result: dict[str, Any],
    path: str | Path,
    *,
    baselines: Sequence[str] = ("mlp-best", "averaging"),
    dpi: int | None = None,
) -> Path:
    """The paper's panel: the ICL model on every condition of a suite (one colour per condition), plus
    baselines of kinds ``baselines`` on the FIRST condition (grey, dashed for all but the first kind)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    values: list[float] = []
    conds = result["conditions"]
    for i, c in enumerate(conds.values()):
        values += _draw(ax, c["predictors"]["icl"], f"ICL: {c['label']}", COLORS[i % len(COLORS)])
    if conds:
        first = next(iter(conds.values()))
        for j, kind in enumerate(baselines):
            for pname, curve in first["predictors"].items():
                if curve.get("meta", {}).get("kind") == kind:
                    label = f"{pname}" + (f" ({first['label']})" if len(conds) > 1 else "")
                    values += _draw(ax, curve, label, BASELINE_GREY, "-" if j == 0 else "--")
    run = result["run"]
    title = (
        f"{run['name']}: {result['suite']['name']} "
        f"({run['attention']} attention, {run['target_depth']}-layer target)"
    )
    _finish(ax, values, result["suite"]["train_examples"], title)
    return _save(fig, path, dpi)


def plot_predictors(
    result: dict[str, Any], condition: str, path: str | Path, *, dpi: int | None = None
) -> Path:
    """Every predictor (ICL model and baselines) on one condition."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    c = result["conditions"][condition]
    values: list[float] = []
    for i, (pname, curve) in enumerate(c["predictors"].items()):
        color = COLORS[0] if pname == "icl" else COLORS[1 + i % (len(COLORS) - 1)]
        values += _draw(
            ax, curve, "ICL transformer" if pname == "icl" else pname, color, "-" if i < 5 else "--"
        )
    run = result["run"]
    _finish(ax, values, result["suite"]["train_examples"], f"{run['name']}: {c['label']}")
    return _save(fig, path, dpi)


def plot_depth_sweep(rows: Sequence[dict[str, Any]], path: str | Path, *, dpi: int | None = None) -> Path:
    """R² against the number of transformer layers, one line per (attention, k) (the paper's Fig. 7)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    groups: dict[tuple[str, int], list[tuple[int, float, float, float]]] = {}
    for r in rows:
        for k, v, lo, hi in zip(r["ks"], r["r2"], r["r2_low"], r["r2_high"], strict=True):
            groups.setdefault((r["attention"], k), []).append((r["layers"], *_finite([v, lo, hi])))
    for i, ((att, k), pts) in enumerate(sorted(groups.items())):
        pts.sort()
        x = [p[0] for p in pts]
        color = COLORS[i % len(COLORS)]
        ax.plot(
            x, [p[1] for p in pts], "-o" if att == "relu" else "--s", color=color, label=f"{att}, k = {k}"
        )
        ax.fill_between(x, [p[2] for p in pts], [p[3] for p in pts], color=color, alpha=0.3, lw=0)
    ax.set_xlabel("Transformer layers")
    ax.set_ylabel("R²")
    ax.set_title("Transformer depth sweep", fontsize=10)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=7)
    return _save(fig, path, dpi)
