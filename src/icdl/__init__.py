"""icdl — in-context deep learning.

A transformer can train a deep neural network by gradient descent inside its own forward pass
(Wu, Su, Hu, Song, Liu, "In-Context Deep Learning via Transformer Models", ICML 2025;
arXiv 2411.16549). This package makes that claim runnable and checkable:

* ``icdl.nets``       — the paper's bias-free N-layer network, losses, Lemma 1 gradient terms, reference GD.
* ``icdl.relu_sums``  — sum-of-ReLU approximations (Definition 4, Lemma 7).
* ``icdl.theory``     — the paper's sizes, bounds and FLOP counts (corrected where the paper errs).
* ``icdl.construct.layers`` — ReLU / softmax attention, ReLU MLP and EWML sublayers.
* ``icdl.construct``  — the compiler of Theorem 1 and its verifier.
* ``icdl.icl``        — tasks, ICL transformers, training, baselines, evaluation, plots.
"""

__version__ = "0.1.0"
