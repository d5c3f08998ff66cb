"""In-context score estimation for diffusion models (the paper's diffusion application; docs/score.md).

* [`config`][icdl.diffusion.config] — [`ScoreConfig`][icdl.diffusion.config.ScoreConfig] /
  [`ScoreTaskConfig`][icdl.diffusion.config.ScoreTaskConfig], presets in ``configs/score/``.
* [`task`][icdl.diffusion.task] — per-prompt Gaussian mixtures on random subspaces, the OU forward process,
  DSM targets, the exact mixture score.
* [`baselines`][icdl.diffusion.baselines] — prior ``-x``, Gaussian fit, empirical score, context-trained
  network, GD on the bias-free score network (from random weights or from the start that outputs ``-x``).
* [`density`][icdl.diffusion.density] — KDE and mixture-fit scores, the task's population score.
* [`tuning`][icdl.diffusion.tuning] — baselines tuned on held-out prompts per (k, t) cell.
* [`train`][icdl.diffusion.train] — pretraining the ICL transformer on the h-weighted DSM loss.
* [`sampler`][icdl.diffusion.sampler] — probability-flow ODE and reverse SDE.
* [`metrics`][icdl.diffusion.metrics] / [`evaluate`][icdl.diffusion.evaluate] /
  [`plots`][icdl.diffusion.plots] — score error curves with bootstrap bands, sliced W2 / MMD of samples,
  plots.
* [`construct`][icdl.diffusion.construct] — the compiled GD transformer on a score network (d_x = d + 1, d_y =
  d).
"""
