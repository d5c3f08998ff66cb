"""Report/plot readability rules: MLP means at matching k, the paper's numbers only for its setting,
least squares' spike in its own panel, one colour per predictor kind."""

from __future__ import annotations

import math
from pathlib import Path

from icdl.icl import plots
from icdl.icl.report import _evaluated_ks, _mean_at, _paper_setting


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


def test_one_colour_per_predictor_kind() -> None:
    colours = list(plots.KIND_COLORS.values())
    assert len(set(colours)) == len(colours)
    for kind in ("icl", "averaging", "least-squares", "ridge", "knn", "mlp-best", "mlp-last", "gd"):
        assert kind in plots.KIND_COLORS
