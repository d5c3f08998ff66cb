"""Plots of the score experiment: error curves with bands, samples against the truth, distances per k."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from icdl.figure import save_figure, subplots

__all__ = ["estimator_color", "plot_distances", "plot_samples", "plot_score_curves"]

COLORS = {
    "icl": "C3", "exact": "k", "prior": "C7", "gaussian_fit": "C2", "empirical": "C4", "population": "C8",
    "kde": "C0", "mixture_fit": "C9", "gd_prior": "C6",
}  # fmt: skip
"""One colour per fixed estimator name (``icdl score evaluate`` / ``icdl score sample``)."""
FAMILY_COLORS = {"mlp": "C1", "gd": "C5"}
"""Colours of the named families: the context MLP (``mlp3x64``) and GD on the score network (``gd3x16_L10``);
distinct from every fixed estimator's."""
DPI = 100
"""Resolution of the score figures (the curves figure is 1,000 px wide)."""


def estimator_color(name: str) -> str:
    """A fixed color per estimator (context nets orange, GD baselines brown)."""
    if name in COLORS:
        return COLORS[name]
    return FAMILY_COLORS["gd"] if name.startswith("gd") else FAMILY_COLORS["mlp"]


def plot_score_curves(result: dict[str, Any], path: str | Path) -> Path:
    """Left: h-weighted error against the exact score per k (log scale, 90 % bands); right: DSM loss."""
    fig, (ax1, ax2) = subplots(1, 2, figsize=(10, 3.8))
    ks = result["k"]
    for name, c in result["score_error"].items():
        pts = [
            (k, m, lo, hi) for k, m, lo, hi in zip(ks, c["mse"], c["low"], c["high"], strict=True) if m == m
        ]
        if not pts:
            continue
        k, m, lo, hi = zip(*pts, strict=True)
        color = estimator_color(name)
        style = "o-" if len(k) < len(ks) else "-"
        ax1.plot(k, m, style, color=color, label=name, ms=4)
        ax1.fill_between(k, lo, hi, color=color, alpha=0.2)
    ax1.set_yscale("log")
    ax1.set_xlabel("in-context examples k")
    ax1.set_ylabel("E h_t |ŝ - ∇log p_t|² (per coord.)")
    ax1.set_title(f"score error ({result['prompts']} prompts, 90% bands)")
    # legends below the panels (two side by side: one to the right would cover the other)
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    for name, vals in result["dsm_loss"].items():
        pairs = [(k, v) for k, v in zip(ks, vals, strict=True) if v == v]
        if pairs:
            pk, pv = zip(*pairs, strict=True)
            style = "o-" if len(pk) < len(ks) else "-"
            ax2.plot(pk, pv, style, color=estimator_color(name), label=name, ms=4)
    prior = [v for v in result["dsm_loss"].get("prior", []) if v == v]
    if prior:  # the memorising estimators' k = 1 spikes would hide everything else
        ax2.set_ylim(0, 1.5 * max(prior))
    ax2.set_xlabel("in-context examples k")
    ax2.set_ylabel("h-weighted DSM loss (per coord.)")
    ax2.set_title("DSM loss (exact score = floor)")
    ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    return save_figure(fig, path, DPI, bbox_inches="tight")


def plot_samples(samples: dict[str, Tensor], path: str | Path, title: str = "") -> Path:
    """One panel per estimator: its samples over the true ``p_0`` samples (grey); context points (x)."""
    names = [n for n in samples if n not in ("true", "context")]
    fig, axes = subplots(1, len(names), figsize=(2.6 * len(names), 2.8), sharex=True, sharey=True)
    true = samples["true"]
    for ax, name in zip(axes, names, strict=True):
        ax.scatter(true[:, 0], true[:, 1], s=3, color="0.75")
        s = samples[name]
        ax.scatter(s[:, 0], s[:, 1], s=3, color=estimator_color(name))
        if "context" in samples:
            c = samples["context"]
            ax.scatter(c[:, 0], c[:, 1], s=12, marker="x", color="k", linewidths=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_xlim(-5, 5)
        ax.set_ylim(-5, 5)
    fig.suptitle(title, fontsize=9, y=1.03)
    return save_figure(fig, path, DPI, bbox_inches="tight")


def plot_distances(result: dict[str, Any], path: str | Path) -> Path:
    """Sliced W2 to the true distribution per k (90 % bands over mixtures when the result has them), with
    the exact-score and two-sample floors."""
    fig, ax = subplots(figsize=(10, 4.8))
    bands = result.get("sw_bands")
    for name, vals in result["sw"].items():
        ax.plot(result["ks"], vals, "o-", color=estimator_color(name), label=name, ms=4)
        if bands is not None:
            ax.fill_between(
                result["ks"], bands["low"][name], bands["high"][name], color=estimator_color(name), alpha=0.15
            )
    ax.axhline(result["floor"]["exact_sw"], color="k", ls="--", label="exact score")
    ax.axhline(result["floor"]["true_sw"], color="k", ls=":", label="two true samples")
    ax.set_xlabel("in-context examples k")
    ax.set_ylabel("sliced W2 to p_0")
    ax.set_title(f"{result['method']} sampler, {result['prompts']} prompts, {result['samples']} samples")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # off the data
    return save_figure(fig, path, DPI, bbox_inches="tight")
