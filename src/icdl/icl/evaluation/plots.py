"""PNG plots of evaluation results in the paper's style (Wu et al. App. F; Garg et al.'s ``basic_plot``).

R² against the number of in-context examples k, one curve per condition or predictor, the 90 % bootstrap
band shaded with alpha 0.3, a dashed line at R² = 1 and a dashed vertical line at the training prompt
length. Figures are built as ``matplotlib.figure.Figure`` objects, never through pyplot, so no display
is needed and the caller's backend (e.g. Jupyter's inline one) is left alone; every function writes one
file atomically and returns its path. The path's suffix picks the format (PNG, PDF or SVG); ``dpi``
sets the resolution.

Readability rules: every predictor kind has ONE colour
([`KIND_COLORS`][icdl.icl.evaluation.plots.KIND_COLORS]) in every plot; predictors evaluated at a few k only
(the MLP baseline) are drawn as markers with error bars at those k, not as lines; least squares' interpolation
spike near k = d (R² far below 0 where the number of examples is close to the input dimension) does not set
the y-axis — it is clipped in the main panel, its clipped points are marked at the bottom edge, and the full
curve is drawn in a panel of its own (symlog scale); conditions the evaluation flags as degenerate are drawn
dotted and labelled DEGENERATE.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from icdl import figure
from icdl.errors import InputError
from icdl.figure import subplots

__all__ = [
    "conditions_figure",
    "plot_conditions",
    "plot_depth_sweep",
    "plot_predictors",
    "plot_training_loss",
    "predictors_figure",
    "training_loss_figure",
]

# The paper's colours for curves A-D (dark red, blue, orange, green) and its grey NN baseline.
COLORS = ("#8b0000", "#1f4e9c", "#ef8a17", "#2e8b57", "#7b3294", "#008080", "#b8860b", "#444444")
BASELINE_GREY = "#808080"
KIND_COLORS: dict[str, str] = {
    "icl": "#8b0000",
    "zero": "#b0b0b0",
    "averaging": "#606060",
    "least-squares": "#ef8a17",
    "ridge": "#1f4e9c",
    "knn": "#2e8b57",
    "mlp-best": "#7b3294",
    "mlp-last": "#c51b7d",
    "gd": "#008080",
    "ridge_tuned": "#4fa8e0",
    "kernel": "#b8860b",
    "radial": "#17becf",
    "blup": "#000000",
    "mlp_tuned": "#8c564b",
    "gd_target": "#6b8e23",
    "compiled": "#d62728",
}
"""One colour per predictor kind (the ``meta.kind`` of a result curve): every kind
[`icdl.icl.evaluation.evaluate`][icdl.icl.evaluation.evaluate] and
[`icdl.icl.analysis.align`][icdl.icl.analysis.align] can produce (the ``mlp`` baseline yields ``mlp-best`` and
``mlp-last``; ``compiled`` is the compiled GD transformer of ``icdl align``), no two alike."""
SPIKE_KIND = "least-squares"


def _finite(vals: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in vals]


def _kind(curve: dict[str, Any], name: str = "") -> str:
    return str(curve.get("meta", {}).get("kind") or name)


def _color(kind: str, fallback_index: int = 0) -> str:
    return KIND_COLORS.get(kind, COLORS[fallback_index % len(COLORS)])


def _draw(ax: Any, curve: dict[str, Any], label: str, color: str, style: str = "-") -> list[float]:
    """One R² curve with its band; NaN (unevaluated) positions are skipped. A predictor evaluated at a
    few k only is drawn as markers with error bars at exactly those k (no line between them)."""
    ks = list(range(len(curve["r2"])))
    r2, lo, hi = _finite(curve["r2"]), _finite(curve["r2_low"]), _finite(curve["r2_high"])
    pts = [(k, a, b, c) for k, a, b, c in zip(ks, r2, lo, hi, strict=True) if math.isfinite(a)]
    if not pts:
        return []
    k_, a_, b_, c_ = (list(t) for t in zip(*pts, strict=True))
    sparse = len(pts) < len(ks) - 1  # a baseline evaluated at a few k only
    if sparse:
        banded = all(math.isfinite(v) for v in b_ + c_)
        # A percentile band need not contain the point estimate: clamp the bars at 0.
        err = [
            [max(0.0, a - b) for a, b in zip(a_, b_, strict=True)],
            [max(0.0, c - a) for a, c in zip(a_, c_, strict=True)],
        ]
        shift = 0.0 if style == "-" else 0.4  # the second of two marker sets beside the first
        ax.errorbar(
            [k + shift for k in k_], a_, yerr=err if banded else None, color=color, label=label,
            fmt="D" if style == "-" else "s", ms=5, capsize=2, lw=1, mfc=color if style == "-" else "white",
        )  # fmt: skip
        return a_
    ax.plot(k_, a_, style, color=color, label=label, lw=1.6)
    if all(math.isfinite(v) for v in b_ + c_):
        ax.fill_between(k_, b_, c_, color=color, alpha=0.3, lw=0)
    return a_


def _mark_clipped(ax: Any, curve: dict[str, Any], color: str, bottom: float) -> None:
    """Down-pointing markers at the bottom edge where a curve leaves the panel."""
    ks = [k for k, v in enumerate(_finite(curve["r2"])) if math.isfinite(v) and v < bottom]
    if ks:
        ax.plot(ks, [bottom + 0.03] * len(ks), "v", color=color, ms=4, clip_on=False)


def _spike_panel(ax: Any, curve: dict[str, Any], label: str, color: str, dim: int | None) -> None:
    """Least squares alone on a symlog axis: its interpolation spike near k = d at full size."""
    ks = list(range(len(curve["r2"])))
    ax.plot(ks, _finite(curve["r2"]), "-", color=color, lw=1.4, label=label)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.axhline(0.0, ls=":", color="#404040", lw=0.8)
    if dim is not None:
        ax.axvline(dim, ls=":", color=color, lw=1)
        ax.text(dim, 1.0, f" k = d = {dim}", color=color, fontsize=7, va="bottom")
    ax.set_ylabel("R² (symlog)", fontsize=8)
    ax.set_xlabel("In-context examples k")
    ax.set_title("least squares alone: the interpolation spike near k = d", fontsize=8)
    ax.grid(alpha=0.25)


CLIP_FLOOR = -0.25
"""The lowest R² an R² panel shows: a predictor far below 0 (GD or kNN at small k reach −1.5) would
squash the band near 1 where the good predictors are, so its curve is clipped there, marked with ▼ at the
bottom edge and ``(clipped)`` in its legend label."""


def _bottom(values: list[float]) -> tuple[float, float]:
    """``(axis bottom, lowest value)``: very negative R² would flatten every other curve, so clip at
    [`CLIP_FLOOR`][icdl.icl.evaluation.plots.CLIP_FLOOR]."""
    finite = [v for v in values if math.isfinite(v)]
    low = min(finite, default=0.0)
    return max(min(low, 0.0) - 0.05, CLIP_FLOOR), low


def _clipped(curve: dict[str, Any], bottom: float) -> bool:
    """Whether ``curve`` leaves an R² panel whose axis starts at ``bottom``."""
    return any(math.isfinite(v) and v < bottom for v in _finite(curve["r2"]))


def _legend_outside(ax: Any) -> None:
    """The legend to the right of the axes, outside the data."""
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _finish(ax: Any, values: list[float], train_examples: int, title: str, *, xlabel: bool = True) -> float:
    ax.axhline(1.0, ls="--", color="#404040", lw=1)
    ax.axvline(train_examples, ls="--", color="#404040", lw=1)
    bottom, low = _bottom(values)
    ax.set_ylim(bottom, 1.05)
    if low < bottom:
        title += f" (min R² {low:.3g} clipped ▼)"
    if xlabel:
        ax.set_xlabel("In-context examples k")
    ax.set_ylabel("R²")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.25)
    _legend_outside(ax)
    return bottom


DEFAULT_DPI = 100
"""Resolution of the PNG reports; with [`FIGSIZE`][icdl.icl.evaluation.plots.FIGSIZE] a panel is over 1,000 px
wide. Pass ``dpi=`` or save as PDF/SVG for print."""
FIGSIZE = (10.5, 5.2)
"""Inches of one R² panel (the legend outside it on the right)."""


def save_figure(fig: Any, path: str | Path, dpi: int | None = None) -> Path:
    """[`icdl.figure.save_figure`][icdl.figure.save_figure] at the reports' resolution (`DEFAULT_DPI` unless
    ``dpi``), cropped to the drawing (``bbox_inches="tight"``)."""
    return figure.save_figure(fig, path, dpi or DEFAULT_DPI, bbox_inches="tight")


BASELINE_STYLES = ("-", "--", "-.", ":")
"""Line styles of the grey baselines in [`plot_conditions`][icdl.icl.evaluation.plots.plot_conditions], in
drawing order."""


def _baselines_to_draw(
    preds: dict[str, Any], wanted: Sequence[str] | None
) -> list[tuple[str, dict[str, Any]]]:
    """The ``(name, curve)`` baselines of one condition to draw: all but ``icl`` when ``wanted`` is
    ``None``, else those whose predictor name or kind is in ``wanted`` (in the order asked)."""
    others = [(n, c) for n, c in preds.items() if n != "icl"]
    if wanted is None:
        return others
    out: list[tuple[str, dict[str, Any]]] = []
    for w in wanted:
        hits = [(n, c) for n, c in others if w in (n, _kind(c, n)) and (n, c) not in out]
        if not hits:
            have = ", ".join(n for n, _ in others) or "none"
            raise InputError(f"baseline {w!r} was not evaluated on this condition (evaluated: {have})")
        out += hits
    return out


def plot_conditions(
    result: dict[str, Any],
    path: str | Path,
    *,
    baselines: Sequence[str] | None = None,
    dpi: int | None = None,
) -> Path:
    """The paper's panel: the ICL model on every condition of a suite (one colour per condition), plus
    baselines on the FIRST condition (grey, one line style per baseline).

    Args:
        result: an evaluation result (`icdl.icl.evaluation.evaluate.evaluate` or ``RUN/eval/<suite>.json``).
        path: the file to write; its suffix (``.png``, ``.pdf``, ``.svg``) picks the format.
        baselines: which baselines to draw, by predictor name (``"ridge"``, ``"mlp-best"``) or kind
            (``meta.kind``); ``None`` (default) draws every baseline evaluated on the first condition,
            ``()`` none. A name that was not evaluated is an ``InputError``.
        dpi: resolution (default [`DEFAULT_DPI`][icdl.icl.evaluation.plots.DEFAULT_DPI]).

    Returns the path written.
    """
    return save_figure(conditions_figure(result, baselines=baselines), path, dpi)


def conditions_figure(result: dict[str, Any], *, baselines: Sequence[str] | None = None) -> Any:
    """The ``matplotlib.figure.Figure`` that [`plot_conditions`][icdl.icl.evaluation.plots.plot_conditions]
    writes (e.g. to show in a notebook)."""
    fig, ax = subplots(figsize=FIGSIZE)
    conds = result["conditions"]
    first: dict[str, Any] = next(iter(conds.values()), {"predictors": {}})
    chosen = _baselines_to_draw(first["predictors"], baselines)  # checked before anything is drawn
    curves: list[tuple[dict[str, Any], str, str, str, bool]] = []  # curve, label, colour, style, sets axis
    for i, c in enumerate(conds.values()):
        bad = bool(c.get("diagnostics", {}).get("degenerate"))
        label = f"ICL: {c['label']}" + (" [DEGENERATE]" if bad else "")
        curves.append((c["predictors"]["icl"], label, COLORS[i % len(COLORS)], ":" if bad else "-", not bad))
    for j, (pname, curve) in enumerate(chosen):
        label = f"{pname}" + (f" ({first['label']})" if len(conds) > 1 else "")
        style = BASELINE_STYLES[j % len(BASELINE_STYLES)]
        # least squares' spike near k = d does not set the axis
        curves.append((curve, label, BASELINE_GREY, style, _kind(curve, pname) != SPIKE_KIND))
    values = [v for cv, *_, sets in curves if sets for v in _finite(cv["r2"])]
    bottom, _ = _bottom(values)
    for curve, label, color, style, _sets in curves:
        clipped = _clipped(curve, bottom)
        _draw(ax, curve, label + (" (clipped ▼)" if clipped else ""), color, style)
        if clipped:
            _mark_clipped(ax, curve, color, bottom)
    run = result["run"]
    title = (
        f"{run['name']}: {result['suite']['name']} "
        f"({run['attention']} attention, {run['target_depth']}-layer target)"
    )
    if any(c.get("diagnostics", {}).get("degenerate") for c in conds.values()):
        title += "\ndotted: DEGENERATE condition (labels almost all 0 or constant; R² not meaningful)"
    _finish(ax, values, result["suite"]["train_examples"], title)
    return fig


def plot_predictors(
    result: dict[str, Any], condition: str, path: str | Path, *, dpi: int | None = None
) -> Path:
    """Every predictor (ICL model and baselines) on one condition, one colour per predictor kind.

    ``condition`` is a key of ``result["conditions"]``: the suite's condition names, e.g. ``"train"``
    for the training distribution (the only condition of ``in-distribution``); an unknown name is an
    ``InputError`` listing the keys.

    Least squares does not set the y-axis of the main panel; when its curve leaves the panel (the
    interpolation spike near k = d), a second panel shows it alone on a symlog scale. Any other curve
    below [`CLIP_FLOOR`][icdl.icl.evaluation.plots.CLIP_FLOOR] is clipped and marked.
    """
    return save_figure(predictors_figure(result, condition), path, dpi)


def predictors_figure(result: dict[str, Any], condition: str) -> Any:
    """The ``matplotlib.figure.Figure`` that [`plot_predictors`][icdl.icl.evaluation.plots.plot_predictors]
    writes (e.g. to show in a notebook)."""
    if condition not in result["conditions"]:
        have = ", ".join(result["conditions"]) or "none"
        raise InputError(f"no condition {condition!r} in this result; its conditions: {have}")
    c = result["conditions"][condition]
    preds = c["predictors"]
    spike = next(
        ((n, cv) for n, cv in preds.items() if _kind(cv, n) == SPIKE_KIND), (None, None)
    )  # fmt: skip
    others: list[float] = []
    for n, cv in preds.items():
        if n != spike[0]:
            others += [v for v in _finite(cv["r2"]) if math.isfinite(v)]
    bottom, _ = _bottom(others)
    spike_vals = [v for v in _finite(spike[1]["r2"]) if math.isfinite(v)] if spike[1] else []
    split = bool(spike_vals) and min(spike_vals) < bottom
    if split:
        fig, (ax, ax2) = subplots(
            2,
            1,
            figsize=(FIGSIZE[0], FIGSIZE[1] * 1.35),
            gridspec_kw={"height_ratios": [3, 1.2]},
            sharex=True,
        )
    else:
        fig, ax = subplots(figsize=FIGSIZE)
    for i, (pname, curve) in enumerate(preds.items()):
        kind = _kind(curve, pname)
        color = _color(kind, i)
        style = "--" if kind in ("mlp-last", "zero") else "-"
        label = "ICL transformer" if pname == "icl" else pname
        clipped = _clipped(curve, bottom)
        if pname == spike[0] and split:
            label += " (clipped ▼; panel below)"
        elif clipped:
            label += " (clipped ▼)"
        _draw(ax, curve, label, color, style)
        if clipped:
            _mark_clipped(ax, curve, color, bottom)
    run = result["run"]
    title = f"{run['name']}: {c['label']}"
    if c.get("diagnostics", {}).get("degenerate"):
        title += " — DEGENERATE (R² not meaningful)"
    _finish(ax, others, result["suite"]["train_examples"], title, xlabel=not split)
    if split and spike[1] is not None:
        dim = result.get("config", {}).get("task", {}).get("dim")
        _spike_panel(ax2, spike[1], spike[0] or SPIKE_KIND, _color(SPIKE_KIND), dim)
    return fig


def training_loss_figure(records: Sequence[dict[str, Any]], title: str) -> Any:
    """Training loss against step from a run's ``metrics.jsonl`` records (``step``, ``loss``, ``y_var``):
    the loss (log scale) and the label variance, the loss of the best constant predictor, for scale."""
    fig, ax = subplots(figsize=FIGSIZE)
    pts = [r for r in records if isinstance(r.get("loss"), (int, float)) and "step" in r]
    steps = [r["step"] for r in pts]
    ax.plot(steps, [r["loss"] for r in pts], "-", color=KIND_COLORS["icl"], lw=1.6, label="training loss")
    if all(isinstance(r.get("y_var"), (int, float)) for r in pts) and pts:
        ax.plot(steps, [r["y_var"] for r in pts], "--", color=BASELINE_GREY, lw=1.2,
                label="label variance (best constant)")  # fmt: skip
    if pts and min(r["loss"] for r in pts) > 0:
        ax.set_yscale("log")
    ax.set_xlabel("Training step")
    ax.set_ylabel("Loss (MSE per label)")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.25)
    _legend_outside(ax)
    return fig


def plot_training_loss(
    records: Sequence[dict[str, Any]],
    path: str | Path,
    *,
    title: str = "training loss",
    dpi: int | None = None,
) -> Path:
    """Write [`training_loss_figure`][icdl.icl.evaluation.plots.training_loss_figure] to ``path``."""
    return save_figure(training_loss_figure(records, title), path, dpi)


def plot_depth_sweep(rows: Sequence[dict[str, Any]], path: str | Path, *, dpi: int | None = None) -> Path:
    """R² against the number of transformer layers, one line per (attention, k) (the paper's Fig. 7)."""
    fig, ax = subplots(figsize=FIGSIZE)
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
    ax.set_title("Transformer depth sweep", fontsize=11)
    ax.grid(alpha=0.25)
    _legend_outside(ax)
    return save_figure(fig, path, dpi)
