"""Plot helpers build ``matplotlib.figure.Figure`` objects and never touch the caller's backend.

A notebook's inline backend must survive a call to any icdl plot helper (calling ``matplotlib.use`` from
a library switches it to Agg and stops inline figures). The test selects the ``svg`` backend (a
non-interactive one that exists everywhere, not Agg) and checks it is still selected after every helper.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
import pytest
import torch

from icdl.cli.approx import _write_plot
from icdl.diffusion import plots as dplots
from icdl.icl.evaluation import plots as iplots
from icdl.inspect import plots as xplots
from icdl.relu_sums import relu_sum_for


def _curve(kind: str, n: int, scale: float) -> dict[str, Any]:
    r2 = [scale * min(k, 5) / 5 for k in range(n)]
    return {
        "r2": r2,
        "r2_low": [v - 0.05 for v in r2],
        "r2_high": [v + 0.05 for v in r2],
        "meta": {"kind": kind},
    }


def _eval_result(n: int = 12) -> dict[str, Any]:
    preds = {
        "icl": _curve("icl", n, 0.9),
        "averaging": _curve("averaging", n, 0.1),
        "ridge_1": _curve("ridge", n, 0.7),
        "least_squares": _curve("least-squares", n, 0.6),
    }
    cond = {"label": "training distribution", "predictors": preds, "diagnostics": {"degenerate": False}}
    return {
        "conditions": {"train": cond},
        "run": {"name": "r", "attention": "relu", "target_depth": 3},
        "suite": {"name": "in-distribution", "train_examples": 8},
        "config": {"task": {"dim": 4}},
    }


def _helpers(tmp: Path) -> list[tuple[str, Callable[[], Any]]]:
    g = torch.Generator().manual_seed(0)
    ks = [1, 2, 4]
    band = {"mse": [1.0, 0.5, 0.2], "low": [0.8, 0.4, 0.1], "high": [1.2, 0.6, 0.3]}
    score = {"k": ks, "prompts": 4, "score_error": {"icl": band}, "dsm_loss": {"icl": [1.0, 0.9, 0.8]}}
    dist = {
        "ks": ks, "sw": {"icl": [0.3, 0.2, 0.1]}, "floor": {"exact_sw": 0.05, "true_sw": 0.02},
        "method": "ode", "prompts": 4, "samples": 16,
    }  # fmt: skip
    samples = {n: torch.randn(16, 2, generator=g) for n in ("true", "icl", "exact", "context")}
    H = torch.randn(2, 5, 7, generator=g)
    res = _eval_result()
    rows = [{"attention": "relu", "layers": L, "ks": [4], "r2": [0.5], "r2_low": [0.4], "r2_high": [0.6]}
            for L in (2, 4)]  # fmt: skip
    names, slots = ["a", "b"], ["x", "y", "z"]
    return [
        ("icl.plot_conditions", lambda: iplots.plot_conditions(res, tmp / "c.png")),
        ("icl.plot_predictors", lambda: iplots.plot_predictors(res, "train", tmp / "p.png")),
        ("icl.plot_depth_sweep", lambda: iplots.plot_depth_sweep(rows, tmp / "d.svg")),
        ("diffusion.plot_score_curves", lambda: dplots.plot_score_curves(score, tmp / "s.png")),
        ("diffusion.plot_samples", lambda: dplots.plot_samples(samples, tmp / "m.png")),
        ("diffusion.plot_distances", lambda: dplots.plot_distances(dist, tmp / "w.png")),
        ("inspect.plot_residual", lambda: xplots.plot_residual(H)),
        ("inspect.plot_head_pattern", lambda: xplots.plot_head_pattern(H[:, :, :5].softmax(-1))),
        ("inspect.plot_slot_trajectory", lambda: xplots.plot_slot_trajectory(H, H + 1e-3)),
        ("inspect.plot_block_map", lambda: xplots.plot_block_map(names, slots, torch.zeros(2, 3))),
        ("cli.approx._write_plot", lambda: _write_plot(relu_sum_for("relu", eps=1e-3), tmp / "a.png", 1e-9)),
    ]


@pytest.mark.parametrize("index", range(11))
def test_plot_helpers_leave_the_backend_alone(index: int, tmp_path: Path, monkeypatch: Any) -> None:
    name, call = _helpers(tmp_path)[index]
    monkeypatch.setitem(matplotlib.rcParams, "backend", "svg")
    pyplot = sys.modules.get("matplotlib.pyplot")
    open_before = list(pyplot.get_fignums()) if pyplot is not None else []
    out = call()
    assert matplotlib.get_backend().lower() == "svg", f"{name} switched the matplotlib backend"
    if pyplot is not None:  # no figure left registered with pyplot (it would leak and show later)
        assert pyplot.get_fignums() == open_before, name
    if isinstance(out, Path):
        assert out.stat().st_size > 0
    elif out is not None:  # the CLI helper writes its file and returns nothing
        assert isinstance(out, matplotlib.figure.Figure)


def test_plot_conditions_draws_every_evaluated_baseline(tmp_path: Path) -> None:
    """Default: every baseline of the first condition is drawn (ridge included); an explicit list by
    predictor name or kind draws exactly those; an unevaluated one is an error."""
    res = _eval_result()
    drawn: list[list[str]] = []
    orig = iplots._draw

    def spy(ax: Any, curve: dict[str, Any], label: str, color: str, style: str = "-") -> list[float]:
        drawn[-1].append(label)
        return orig(ax, curve, label, color, style)

    mp = pytest.MonkeyPatch()
    mp.setattr(iplots, "_draw", spy)
    try:
        for wanted in (None, ["ridge"], ["ridge_1", "averaging"]):
            drawn.append([])
            iplots.plot_conditions(res, tmp_path / "c.png", baselines=wanted)
        with pytest.raises(Exception, match="knn"):
            iplots.plot_conditions(res, tmp_path / "c.png", baselines=["knn"])
    finally:
        mp.undo()
    assert sorted(drawn[0][1:]) == sorted(["averaging", "ridge_1", "least_squares"])
    assert drawn[1][1:] == ["ridge_1"]
    assert drawn[2][1:] == ["ridge_1", "averaging"]


@pytest.mark.parametrize("index", range(10))
def test_every_legend_sits_off_its_axes_data(index: int, tmp_path: Path, monkeypatch: Any) -> None:
    """No helper's legend covers the data: each Axes legend lies outside that Axes' box (figures saved to a
    file are captured at ``savefig``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    name, call = _helpers(tmp_path)[index]
    saved: list[Figure] = []
    orig = Figure.savefig

    def capture(self: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(self)
        orig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", capture)
    out = call()
    figs = [*saved, *([out] if isinstance(out, Figure) else [])]
    assert figs, name
    legends = 0
    for fig in figs:
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        for ax in fig.axes:
            leg = ax.get_legend()
            if leg is None:
                continue
            legends += 1
            box, area = leg.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert not box.overlaps(area), f"{name}: a legend covers its axes"
    if name.startswith(
        ("diffusion.plot_score", "diffusion.plot_distances", "inspect.plot_slot", "icl.plot_p")
    ):
        assert legends >= 1, name  # non-vacuous where a helper draws a legend
