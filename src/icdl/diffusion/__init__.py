"""In-context score estimation for diffusion models (the paper's diffusion application; docs/score.md).

* :mod:`~icdl.diffusion.config` — :class:`ScoreConfig` / :class:`ScoreTaskConfig`, presets in
  ``configs/score/``.
* :mod:`~icdl.diffusion.task` — per-prompt Gaussian mixtures on random subspaces, the OU forward process,
  DSM targets, the exact mixture score.
* :mod:`~icdl.diffusion.baselines` — prior ``-x``, Gaussian fit, empirical score, context-trained network.
* :mod:`~icdl.diffusion.train` — pretraining the ICL transformer on the h-weighted DSM loss.
* :mod:`~icdl.diffusion.sampler` — probability-flow ODE and reverse SDE.
* :mod:`~icdl.diffusion.metrics` / :mod:`~icdl.diffusion.evaluate` / :mod:`~icdl.diffusion.plots` — score
  error curves with bootstrap bands, sliced W2 / MMD of samples, plots.
* :mod:`~icdl.diffusion.construct` — the compiled GD transformer on a score network (d_x = d + 1, d_y = d).
"""
