"""In-context learning: prompt tasks, the trainable ICL transformer, and its trainer.

* [`icdl.icl.tasks`][icdl.icl.tasks]  — random N-layer network tasks, ``sample_batch(cfg, B, seed=, step=)``.
* [`icdl.icl.models`][icdl.icl.models] — ``ICLTransformer`` (softmax or ReLU attention), ``build_model``.
* [`icdl.icl.training.train`][icdl.icl.training.train]  — ``train(cfg, run_dir)``, ``load_run(run_dir) ->
  (model, cfg)`` (``load_run`` is re-exported here; ``train`` is not, since the name is the submodule's).

Every predictor in this package (the ICL model and every baseline) has the signature
``predict(xs (B, n, d_x), ys (B, n, d_y)) -> (B, n, d_y)``, where output row i uses only
``x_0, y_0, ..., x_{i-1}, y_{i-1}, x_i``. Submodules are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ICLTransformer", "PromptBatch", "build_model", "load_run", "sample_batch"]

_LAZY = {
    "ICLTransformer": "icdl.icl.models",
    "build_model": "icdl.icl.models",
    "PromptBatch": "icdl.icl.tasks",
    "sample_batch": "icdl.icl.tasks",
    "load_run": "icdl.icl.training.train",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'icdl.icl' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazy names are not globals until first used; list them so dir() and tab completion show them.
    return sorted(set(globals()) | set(_LAZY))
