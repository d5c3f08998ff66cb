"""The baselines, one module per family: the simple ones, the per-prompt MLP and GD
([`simple`][icdl.icl.baselines.simple]), kernel ridge ([`kernel`][icdl.icl.baselines.kernel]), the tuned MLP
([`mlp_tuned`][icdl.icl.baselines.mlp_tuned]) and GD on the target network
([`gd_target`][icdl.icl.baselines.gd_target]). The names of ``simple`` are re-exported here, so
``icdl.icl.baselines.LeastSquaresBaseline`` keeps working."""

from icdl.icl.baselines.simple import (
    DEFAULT_LR_GRID,
    AveragingBaseline,
    Baseline,
    GDBaseline,
    KNNBaseline,
    LeastSquaresBaseline,
    MLPBaseline,
    MLPTrace,
    ZeroBaseline,
    check_prompts,
)

__all__ = [
    "DEFAULT_LR_GRID",
    "AveragingBaseline",
    "Baseline",
    "GDBaseline",
    "KNNBaseline",
    "LeastSquaresBaseline",
    "MLPBaseline",
    "MLPTrace",
    "ZeroBaseline",
    "check_prompts",
]
