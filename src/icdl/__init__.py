"""icdl — in-context deep learning.

A transformer can train a deep neural network by gradient descent inside its own forward pass
(Wu, Su, Hu, Song, Liu, "In-Context Deep Learning via Transformer Models", ICML 2025;
arXiv 2411.16549). This package makes that claim runnable and checkable:

* ``icdl.nets``       — the paper's bias-free N-layer network, losses, Lemma 1 gradient terms, reference GD.
* ``icdl.relu_sums``  — sum-of-ReLU approximations (Definition 4, Lemma 7).
* ``icdl.theory``     — the paper's sizes, bounds and FLOP counts (corrected where the paper errs).
* ``icdl.sublayer``   — the self-description every compiled sublayer carries (name, role, sizes, slots).
* ``icdl.construct.engine.layers`` — ReLU / softmax attention, ReLU MLP and EWML sublayers.
* ``icdl.construct``  — the compiler of Theorem 1 and its verifier.
* ``icdl.icl``        — tasks, ICL transformers, training, baselines, evaluation, plots.
* ``icdl.inspect``    — named activations, head patterns and plots for both model kinds.

The common entry points are importable from the top level (loaded on first use, so ``import icdl``
stays cheap):

```python
import icdl
model = icdl.compile_gd_transformer(icdl.NetSpec(depth=2, width=4, in_dim=3, out_dim=1), steps=2, n=8)
run_model, cfg = icdl.load_run("runs/tiny")
```
"""

from __future__ import annotations

import importlib
from typing import Any

from icdl import aliases

__version__ = "0.1.0"

aliases.install()  # the old module paths (before issue 32's subpackages) import with a DeprecationWarning

_LAZY: dict[str, str] = {
    # compile and verify (Theorem 1)
    "NetSpec": "icdl.nets",
    "reference_gd": "icdl.nets",
    "compile_gd_transformer": "icdl.construct",
    "sample_task": "icdl.construct",
    "verify": "icdl.construct",
    # pretrain and evaluate (App. F)
    "load_config": "icdl.config",
    "train": "icdl.icl.training.train",
    "load_run": "icdl.icl.training.train",
    "sample_batch": "icdl.icl.tasks",
    "evaluate_run": "icdl.icl.evaluation.evaluate",
    # look inside
    "run_with_cache": "icdl.inspect",
    "plot_residual": "icdl.inspect",
    "plot_head_pattern": "icdl.inspect",
    "plot_slot_trajectory": "icdl.inspect",
    # errors
    "InputError": "icdl.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'icdl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
