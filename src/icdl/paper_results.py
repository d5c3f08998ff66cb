"""The paper's reported R² values (Wu et al., ICML 2025, Appendix F), as data for side-by-side reports.

Provenance: values read from the vector
graphics of the ICML camera-ready PDF (Figs. 3-7; accuracy about ±0.001 R²). The paper prints no table:
every number here is a figure reading. Setting of these numbers: d = 20, inputs
N(-2, I) (test mixtures ω1 N(-2, I) + (1 - ω1) N(2, I)), bias-free N-layer ReLU targets, 12-layer GPT-2
transformers trained on 50 examples, tested on 75; R² across 6,400 prompts at each k; the NN baseline is
the per-prompt N-layer width-200 MLP with the best epoch of 100 (an oracle choice).

* `F1` — Figs. 3 (ReLU attention) and 4 (softmax): input-distribution shift and longer prompts,
  per target depth N in {3, 4, 6}; curves ω1 in {1.0, 0.9, 0.7, 0.5} and "nn" (the N-layer MLP baseline).
* `F2` — Figs. 5 and 6: weight-distribution shift N(0 / -0.5 / 0.5, I), 4-layer target.
* `F3` — Fig. 7: transformer depth 4/6/8/10 at k = 15, 30, 45 (target depth unstated).
* `FLOPS` — App. A.3: "3.3 billion vs. 7.6 billion FLOPs" and the reconstruction of both numbers.
"""

from __future__ import annotations

__all__ = [
    "F1",
    "F1_KS",
    "F2",
    "F2_KS",
    "F3",
    "FLOPS",
    "PROVENANCE",
    "curve_key",
    "f1_mean",
    "f2_mean",
    "paper_range",
]

PROVENANCE = (
    "Wu et al., ICML 2025, App. F, Figs. 3-7, values read from the PDF's vector graphics "
    "(docs/protocol.md, metric; ±0.001 R²)"
)

F1_KS: tuple[int, ...] = (0, 1, 2, 5, 10, 15, 25, 30, 45, 50, 60, 75)

# (attention, target depth, curve) -> (R² at F1_KS, mean k=1..50, mean k=51..75); curve = ω1 or "nn".
F1: dict[tuple[str, int, str], tuple[tuple[float, ...], float, float]] = {
    ("relu", 3, "1.0"): (
        (-0.006, 0.752, 0.783, 0.811, 0.85, 0.887, 0.894, 0.876, 0.87, 0.876, 0.863, 0.857),
        0.861,
        0.873,
    ),
    ("relu", 3, "0.9"): (
        (-0.001, 0.709, 0.771, 0.8, 0.847, 0.844, 0.809, 0.841, 0.829, 0.856, 0.844, 0.845),
        0.832,
        0.845,
    ),
    ("relu", 3, "0.7"): (
        (-0.945, 0.379, 0.423, 0.397, 0.479, 0.518, 0.579, 0.484, 0.641, 0.648, 0.597, 0.6),
        0.546,
        0.599,
    ),
    ("relu", 3, "0.5"): (
        (-1.334, 0.153, 0.165, 0.244, 0.261, 0.253, 0.256, 0.318, 0.422, 0.302, 0.315, 0.367),
        0.274,
        0.337,
    ),
    ("relu", 3, "nn"): (
        (-0.005, 0.746, 0.788, 0.835, 0.868, 0.918, 0.933, 0.929, 0.947, 0.955, 0.957, 0.949),
        0.916,
        0.952,
    ),
    ("relu", 4, "1.0"): (
        (-0.009, 0.709, 0.832, 0.831, 0.876, 0.835, 0.852, 0.865, 0.877, 0.864, 0.877, 0.891),
        0.845,
        0.855,
    ),
    ("relu", 4, "0.9"): (
        (-0.0, 0.666, 0.728, 0.752, 0.827, 0.765, 0.815, 0.837, 0.839, 0.793, 0.837, 0.852),
        0.805,
        0.83,
    ),
    ("relu", 4, "0.7"): (
        (-0.683, 0.342, 0.477, 0.5, 0.316, 0.51, 0.517, 0.43, 0.373, 0.371, 0.39, 0.395),
        0.445,
        0.359,
    ),
    ("relu", 4, "0.5"): (
        (-1.247, 0.045, 0.009, 0.285, -0.08, 0.241, 0.331, -0.027, -0.333, -0.232, 0.006, -0.065),
        0.009,
        -0.056,
    ),
    ("relu", 4, "nn"): (
        (-0.01, 0.619, 0.775, 0.817, 0.863, 0.884, 0.868, 0.911, 0.897, 0.887, 0.836, 0.921),
        0.856,
        0.889,
    ),
    ("relu", 6, "1.0"): (
        (-0.008, 0.742, 0.856, 0.845, 0.859, 0.895, 0.873, 0.847, 0.873, 0.864, 0.87, 0.9),
        0.869,
        0.88,
    ),
    ("relu", 6, "0.9"): (
        (-0.005, 0.744, 0.818, 0.829, 0.843, 0.852, 0.884, 0.862, 0.852, 0.879, 0.865, 0.876),
        0.85,
        0.862,
    ),
    ("relu", 6, "0.7"): (
        (-0.026, 0.597, 0.636, 0.663, 0.751, 0.717, 0.764, 0.747, 0.629, 0.619, 0.574, 0.438),
        0.7,
        0.491,
    ),
    ("relu", 6, "0.5"): (
        (-0.086, 0.383, 0.667, 0.647, 0.482, 0.496, 0.663, 0.641, 0.324, 0.327, 0.42, 0.12),
        0.535,
        0.26,
    ),
    ("relu", 6, "nn"): (
        (-0.005, 0.736, 0.835, 0.841, 0.894, 0.908, 0.916, 0.899, 0.916, 0.902, 0.918, 0.944),
        0.901,
        0.929,
    ),
    ("softmax", 3, "1.0"): (
        (0.003, 0.604, 0.733, 0.765, 0.862, 0.89, 0.942, 0.934, 0.962, 0.969, 0.931, 0.918),
        0.904,
        0.937,
    ),
    ("softmax", 3, "0.9"): (
        (0.001, 0.629, 0.733, 0.728, 0.819, 0.872, 0.913, 0.929, 0.953, 0.935, 0.913, 0.906),
        0.885,
        0.922,
    ),
    ("softmax", 3, "0.7"): (
        (0.002, 0.366, 0.443, 0.625, 0.683, 0.695, 0.637, 0.633, 0.655, 0.763, 0.747, 0.683),
        0.626,
        0.682,
    ),
    ("softmax", 3, "0.5"): (
        (-0.245, -0.145, -0.045, 0.179, 0.279, 0.253, 0.312, 0.276, 0.304, 0.464, 0.367, 0.458),
        0.275,
        0.404,
    ),
    ("softmax", 3, "nn"): (
        (-0.0, 0.569, 0.723, 0.748, 0.837, 0.874, 0.918, 0.896, 0.925, 0.932, 0.932, 0.939),
        0.876,
        0.925,
    ),
    ("softmax", 4, "1.0"): (
        (-0.004, 0.764, 0.866, 0.847, 0.902, 0.932, 0.93, 0.967, 0.972, 0.974, 0.953, 0.947),
        0.938,
        0.952,
    ),
    ("softmax", 4, "0.9"): (
        (-0.012, 0.763, 0.781, 0.848, 0.899, 0.929, 0.931, 0.948, 0.959, 0.96, 0.938, 0.933),
        0.924,
        0.94,
    ),
    ("softmax", 4, "0.7"): (
        (-0.007, 0.51, 0.474, 0.732, 0.698, 0.763, 0.76, 0.767, 0.768, 0.781, 0.759, 0.773),
        0.712,
        0.715,
    ),
    ("softmax", 4, "0.5"): (
        (-0.723, -0.397, -0.036, 0.406, 0.426, 0.527, 0.583, 0.494, 0.389, 0.5, 0.559, 0.576),
        0.467,
        0.499,
    ),
    ("softmax", 4, "nn"): (
        (-0.004, 0.718, 0.775, 0.819, 0.878, 0.903, 0.869, 0.919, 0.874, 0.922, 0.906, 0.83),
        0.88,
        0.894,
    ),
    ("softmax", 6, "1.0"): (
        (-0.001, 0.766, 0.838, 0.894, 0.867, 0.876, 0.891, 0.867, 0.887, 0.901, 0.904, 0.892),
        0.877,
        0.883,
    ),
    ("softmax", 6, "0.9"): (
        (-0.005, 0.752, 0.786, 0.849, 0.863, 0.845, 0.874, 0.895, 0.869, 0.866, 0.87, 0.867),
        0.862,
        0.867,
    ),
    ("softmax", 6, "0.7"): (
        (-0.005, 0.584, 0.59, 0.622, 0.722, 0.744, 0.723, 0.707, 0.752, 0.722, 0.734, 0.745),
        0.695,
        0.71,
    ),
    ("softmax", 6, "0.5"): (
        (-0.059, 0.334, 0.558, 0.575, 0.565, 0.576, 0.642, 0.518, 0.707, 0.656, 0.591, 0.599),
        0.609,
        0.619,
    ),
    ("softmax", 6, "nn"): (
        (-0.001, 0.763, 0.824, 0.894, 0.89, 0.898, 0.928, 0.907, 0.9, 0.934, 0.938, 0.931),
        0.902,
        0.926,
    ),
}

F2_KS: tuple[int, ...] = (1, 2, 5, 10, 20, 25, 30, 45, 50, 75)

# (attention, weight mean, "icl" | "nn") -> (R² at F2_KS, mean k=1..50, mean k=51..75); 4-layer target.
F2: dict[tuple[str, float, str], tuple[tuple[float, ...], float, float]] = {
    ("relu", 0.0, "icl"): (
        (0.709, 0.832, 0.831, 0.876, 0.858, 0.852, 0.865, 0.877, 0.864, 0.891),
        0.845,
        0.855,
    ),
    ("relu", 0.0, "nn"): (
        (0.619, 0.775, 0.817, 0.863, 0.864, 0.868, 0.911, 0.897, 0.887, 0.921),
        0.856,
        0.889,
    ),
    ("relu", -0.5, "icl"): (
        (0.582, 0.727, 0.707, 0.789, 0.838, 0.839, 0.811, 0.767, 0.824, 0.826),
        0.79,
        0.797,
    ),
    ("relu", -0.5, "nn"): (
        (0.528, 0.667, 0.714, 0.791, 0.899, 0.872, 0.846, 0.864, 0.871, 0.836),
        0.808,
        0.862,
    ),
    ("relu", 0.5, "icl"): ((0.723, 0.802, 0.73, 0.818, 0.827, 0.82, 0.815, 0.801, 0.836, 0.865), 0.82, 0.837),
    ("relu", 0.5, "nn"): (
        (0.67, 0.701, 0.766, 0.832, 0.815, 0.788, 0.872, 0.881, 0.806, 0.884),
        0.833,
        0.872,
    ),
    ("softmax", 0.0, "icl"): (
        (0.764, 0.866, 0.847, 0.902, 0.952, 0.93, 0.967, 0.972, 0.974, 0.947),
        0.938,
        0.952,
    ),
    ("softmax", 0.0, "nn"): (
        (0.718, 0.775, 0.819, 0.878, 0.885, 0.869, 0.919, 0.874, 0.922, 0.83),
        0.88,
        0.894,
    ),
    ("softmax", -0.5, "icl"): (
        (0.797, 0.883, 0.874, 0.885, 0.904, 0.9, 0.914, 0.904, 0.928, 0.913),
        0.898,
        0.904,
    ),
    ("softmax", -0.5, "nn"): (
        (0.667, 0.76, 0.844, 0.888, 0.814, 0.911, 0.862, 0.924, 0.898, 0.889),
        0.865,
        0.897,
    ),
    ("softmax", 0.5, "icl"): (
        (0.844, 0.845, 0.902, 0.875, 0.922, 0.907, 0.931, 0.923, 0.903, 0.888),
        0.903,
        0.907,
    ),
    ("softmax", 0.5, "nn"): (
        (0.711, 0.875, 0.867, 0.738, 0.885, 0.917, 0.928, 0.889, 0.937, 0.869),
        0.892,
        0.903,
    ),
}

# (attention, k) -> {transformer layers: R²}; target depth unstated in the paper.
F3: dict[tuple[str, int], dict[int, float]] = {
    ("relu", 15): {4: 0.815, 6: 0.849, 8: 0.858, 10: 0.861},
    ("relu", 30): {4: 0.829, 6: 0.859, 8: 0.87, 10: 0.884},
    ("relu", 45): {4: 0.835, 6: 0.856, 8: 0.869, 10: 0.883},
    ("softmax", 15): {4: 0.846, 6: 0.859, 8: 0.885, 10: 0.902},
    ("softmax", 30): {4: 0.85, 6: 0.871, 8: 0.91, 10: 0.905},
    ("softmax", 45): {4: 0.854, 6: 0.877, 8: 0.91, 10: 0.91},
}

FLOPS: dict[str, float | str] = {
    "icl_gflops": 3.3,
    "direct_training_gflops": 7.6,
    "icl_rule": "2 N_params T with N_params = 22.4M (GPT-2 incl. the unused vocabulary table) and T = 76",
    "direct_rule": "6 P D with P = 168,000 (6-layer width-200 net) and D = 75 examples x 100 epochs",
    "source": "App. A.3 (the numbers); docs/protocol.md, FLOPs (their reconstruction)",
}


def paper_range(k_lo: int, k_hi: int) -> str | None:
    """The paper's summary key (``"mean_1_50"`` / ``"mean_51_75"``) for a k range, if it is one of them."""
    return {(1, 50): "mean_1_50", (51, 75): "mean_51_75"}.get((k_lo, k_hi))


def f1_mean(attention: str, depth: int, curve: str, which: str = "mean_1_50") -> float | None:
    """The paper's F.1 mean R² over ``k = 1..50`` (``which="mean_1_50"``) or ``51..75`` for one curve.

    ``curve`` is the first mixture weight as printed by [`curve_key`][icdl.paper_results.curve_key]
    (``"1.0"``, ``"0.9"``, ``"0.7"``, ``"0.5"``) or ``"nn"``; ``None`` when the paper has no such curve (e.g.
    a 2-layer target).
    """
    row = F1.get((attention, int(depth), curve))
    if row is None:
        return None
    return row[1] if which == "mean_1_50" else row[2]


def f2_mean(attention: str, weight_mean: float, who: str, which: str = "mean_1_50") -> float | None:
    """The paper's F.2 mean R² (4-layer target) for the ICL model (``who="icl"``) or the NN baseline."""
    row = F2.get((attention, float(weight_mean), who))
    if row is None:
        return None
    return row[1] if which == "mean_1_50" else row[2]


def curve_key(omega1: float) -> str:
    """The F.1 curve key of a first-component weight (``0.9 -> "0.9"``)."""
    return f"{float(omega1):.1f}"
