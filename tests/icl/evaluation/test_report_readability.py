"""Report/plot readability rules: MLP means at matching k, the paper's numbers only for its setting,
least squares' spike in its own panel, one colour per predictor kind."""

from __future__ import annotations

import math
from pathlib import Path

from icdl.icl.evaluation import plots
from icdl.icl.evaluation.report import _evaluated_ks, _mean_at, _paper_setting


def test_sparse_means_are_taken_at_the_evaluated_k() -> None:
    mlp = [None, 0.1, None, None, None, 0.5, None, None, None, None, 0.7]
    icl = [0.0, 0.2, 0.3, 0.3, 0.3, 0.4, 0.4, 0.4, 0.4, 0.4, 0.6]
    ks = _evaluated_ks(mlp, 1, 10)
    assert ks == [1, 5, 10]
    assert math.isclose(_mean_at(icl, ks), (0.2 + 0.4 + 0.6) / 3)
    assert _mean_at(icl, []) is None


def test_paper_columns_only_for_the_papers_relu_targets() -> None:
    task = {
        "activation": "relu",
        "inputs": {"kind": "gaussian", "mean": -2.0, "center": False},
        "standardize": "none",
        "weight_mean": 0.0,
    }
    assert _paper_setting({"task": task})
    assert not _paper_setting({"task": {**task, "activation": "tanh"}})
    assert not _paper_setting({"task": {**task, "standardize": "task"}})


def _curve(kind: str, r2: list[float | None]) -> dict:
    band = [None if v is None else v - 0.05 for v in r2], [None if v is None else v + 0.05 for v in r2]
    return {"r2": r2, "r2_low": band[0], "r2_high": band[1], "meta": {"kind": kind}}


def _result(ls: list[float]) -> dict:
    n = len(ls)
    preds = {
        "icl": _curve("icl", [0.1 * min(k, 5) for k in range(n)]),
        "averaging": _curve("averaging", [0.0] * n),
        "least_squares": _curve("least-squares", ls),
        "mlp3x8_best": _curve("mlp-best", [0.2 if k in (1, 5, 10) else None for k in range(n)]),
    }
    cond = {"label": "c", "predictors": preds, "diagnostics": {"degenerate": False}}
    return {
        "conditions": {"c": cond},
        "run": {"name": "r", "attention": "relu", "target_depth": 3},
        "suite": {"name": "s", "train_examples": 10},
        "config": {"task": {"dim": 8}},
    }


def _png_height(path: Path) -> int:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[20:24], "big")


def test_least_squares_spike_gets_its_own_panel(tmp_path: Path) -> None:
    calm = [0.0] + [0.5] * 15
    spiky = [0.0] + [0.5] * 6 + [-300.0, -40.0] + [0.5] * 7  # the interpolation spike near k = d
    a = plots.plot_predictors(_result(calm), "c", tmp_path / "calm.png")
    b = plots.plot_predictors(_result(spiky), "c", tmp_path / "spiky.png")
    assert _png_height(b) > _png_height(a) * 1.2  # a second panel below the main one


def _every_kind() -> set[str]:
    """Every predictor kind the evaluation and ``icdl align`` can produce (``mlp`` yields two)."""
    from icdl.icl.analysis.align import ALIGN_BASELINES
    from icdl.icl.evaluation.evaluate import BASELINES, OPTIONAL_BASELINES

    kinds = {*BASELINES, *OPTIONAL_BASELINES, *ALIGN_BASELINES, "icl", "compiled"} - {"mlp"}
    return kinds | {"mlp-best", "mlp-last"}


def test_one_colour_per_predictor_kind() -> None:
    colours = list(plots.KIND_COLORS.values())
    assert len({c.lower() for c in colours}) == len(colours)  # no two kinds share a colour
    missing = _every_kind() - set(plots.KIND_COLORS)
    assert missing == set(), f"kinds without a colour: {sorted(missing)}"
    assert {"kernel", "ridge_tuned", "mlp_tuned", "gd_target"} <= _every_kind()


def _spread_result() -> dict:
    """GD and kNN far below 0 at small k, the good predictors in 0.6-1.0."""
    n = 41
    res = _result([0.5] * n)
    preds = res["conditions"]["c"]["predictors"]
    preds["icl"] = _curve("icl", [min(0.95, 0.6 + 0.02 * k) for k in range(n)])
    preds["ridge_tuned"] = _curve("ridge_tuned", [min(0.97, 0.6 + 0.03 * k) for k in range(n)])
    preds["gd"] = _curve("gd", [-1.5 + 0.05 * k for k in range(n)])
    preds["knn"] = _curve("knn", [-1.2 + 0.05 * k for k in range(n)])
    return res


def _layout(fig: object) -> tuple[object, object]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # a canvas for this figure only; the global backend is untouched
    canvas.draw()
    ax = fig.axes[0]  # type: ignore[attr-defined]
    return ax, ax.get_legend()


def test_figures_are_wide_clip_outliers_and_keep_the_legend_off_the_data() -> None:
    for fig in (
        plots.predictors_figure(_spread_result(), "c"),
        plots.conditions_figure(_spread_result()),
    ):
        assert fig.get_size_inches()[0] * plots.DEFAULT_DPI >= 1000
        ax, legend = _layout(fig)
        bottom, top = ax.get_ylim()
        assert bottom >= plots.CLIP_FLOOR and top >= 1.0  # -1.5 does not set the axis
        assert (0.95 - 0.6) / (top - bottom) > 0.25  # the good predictors' band is readable
        assert legend is not None and legend.get_window_extent().x0 >= ax.get_window_extent().x1
        labels = [t.get_text() for t in legend.get_texts()]
        assert any(lbl.startswith("gd") and "clipped" in lbl for lbl in labels), labels
        assert not any(lbl.startswith(("ICL", "ridge_tuned")) and "clipped" in lbl for lbl in labels)
        assert all(t.get_fontsize() >= 8 for t in legend.get_texts())


def test_training_loss_figure(tmp_path: Path) -> None:
    recs = [{"step": s, "loss": 1.0 / s, "y_var": 1.0} for s in range(1, 50)]
    fig = plots.training_loss_figure(recs, "run")
    ax, legend = _layout(fig)
    assert [t.get_text() for t in legend.get_texts()] == ["training loss", "label variance (best constant)"]
    assert list(ax.lines[0].get_xdata()) == list(range(1, 50)) and ax.get_yscale() == "log"
    assert plots.plot_training_loss(recs, tmp_path / "loss.png").stat().st_size > 1000
