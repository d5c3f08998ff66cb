"""Memory and time of the score commands before they start (``icdl score train|evaluate|sample``).

Coarse, conservative cost models in the spirit of [`icdl.budget`][icdl.budget]: FLOPs of the dominant loops at
`icdl.budget.CPU_FLOPS` plus a per-call overhead for the many small steps (sampler steps, Adam steps of
the context-trained network), and the largest tensors held at once. They exist so that an oversized request
is refused in a second with the estimate, not to predict run times closely.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from icdl.budget import CPU_FLOPS, Estimate
from icdl.config import ModelConfig
from icdl.diffusion.config import ScoreConfig

__all__ = [
    "sampling_estimate",
    "score_construct_estimate",
    "score_curves_estimate",
    "score_train_estimate",
    "tuning_bytes",
    "tuning_seconds",
]

_STEP_OVERHEAD = 5e-4  # seconds per small Python-driven step (one sampler step, one Adam step)
_BASE_BYTES = 400 * 2**20  # torch itself, the model, the prompt


def _icl_params(m: ModelConfig, d_tok: int) -> int:
    return (
        m.layers * (4 * m.d_model**2 + 2 * m.d_model * m.d_mlp) + (d_tok + 2 * m.max_points + 1) * m.d_model
    )


def _mlp_params(depth: int, width: int, dim: int) -> int:
    return (dim + 1) * width + max(0, depth - 2) * width * width + width * dim


def score_train_estimate(cfg: ScoreConfig) -> Estimate:
    """Training ``cfg``: ``6 P B T`` FLOPs per step (forward + backward) plus attention, parameters and
    AdamW state four times over, the activations kept for the backward pass, and the batch's mixtures.

    Drawing a batch ([`icdl.diffusion.task.sample_score_batch`][icdl.diffusion.task.sample_score_batch])
    holds, per mixture component and prompt, its ``k`` latent mean and weight with their cumulative sums
    (float64) and one comparison byte per point that picks each point's component:
    ``B m (n + 8 (k + 2))`` bytes for ``m`` components, ``n`` points (measured 4.3 KiB per component for
    score-small)."""
    m, t, task = cfg.model, cfg.train, cfg.task
    T, B = 2 * task.points, t.batch_size
    P = _icl_params(m, max(task.d_x, task.d_y))
    flops = t.steps * (6 * P * B * T + 12 * B * T * T * m.d_model * m.layers)
    acts = B * T * m.layers * (8 * m.d_model + 2 * m.d_mlp + m.heads * T)
    mixtures = B * task.components * (task.points + 8 * (task.latent_dim + 2))
    return Estimate(
        f"icdl score train ({cfg.name})",
        float(_BASE_BYTES + 16 * P + 4 * acts + mixtures),
        5.0 + flops / CPU_FLOPS + t.steps * _STEP_OVERHEAD,
        f"{t.steps} steps x batch {B} x {T} tokens, {P:,} parameters",
    )


_ELEMENT_SECONDS = 1e-7  # per element of a (prompts, n, n, m, d) EM / KDE tensor per pass (loaded CPU)


def tuning_seconds(cfg: ScoreConfig, names: Sequence[str], *, prompts: int, gd_ks: int) -> float:
    """Seconds to tune and run the baselines ``names`` of [`icdl.diffusion.tuning`][icdl.diffusion.tuning]
    on ``prompts`` held-out plus ``prompts`` test prompts: every candidate of the grid on the held-out ones
    (24 GD settings of 10 / 100 steps at ``gd_ks`` k, 12 KDE bandwidths, 13 mixture settings of 30 EM
    passes). Calibrated on 64 prompts at load 9 on 2 cores (36 s measured)."""
    task = cfg.task
    n, d = task.points, task.dim
    gd = _mlp_params(3, 16, d)
    sec = 0.0
    if "gd_prior" in names:
        sec += 24 * gd_ks * (110 * _STEP_OVERHEAD * 4 + 6 * gd * 2 * prompts * n * 110 / CPU_FLOPS)
    if "kde" in names:
        sec += 12 * 2 * prompts * n * n * d * 10 * _ELEMENT_SECONDS
    if "mixture_fit" in names:
        sec += 13 * 2 * prompts * n * n * (task.components + 1) * d * 30 * _ELEMENT_SECONDS
    return sec


def tuning_bytes(cfg: ScoreConfig, names: Sequence[str], *, prompts: int, gd_width: int = 16) -> float:
    """Peak bytes of tuning and running the baselines ``names`` of
    [`icdl.diffusion.tuning`][icdl.diffusion.tuning] on ``prompts`` prompts (their largest family, one
    candidate at a time; ``n = task.points``).

    * ``mixture_fit``: each EM pass of
      [`MixtureFitScore.fit_prefixes`][icdl.diffusion.density.MixtureFitScore.fit_prefixes] holds
      ``(prompts, n, n, m)`` float64 responsibilities, squared distances and their softmax for every prefix
      at once, ``m`` up to ``components + 1``; with the allocator's slack over 30 passes measured 9-16x one
      such tensor (60-97 MiB at 128 prompts, 143-212 at 256, 41 points, m = 4, by load), so 12x counted.
    * ``kde``: the ``(prompts, n, n, d)`` float64 differences to every context point, measured 4x (26 MiB at
      256 prompts), 5x counted.
    * ``gd_prior``: plain GD's weight trajectory at 100 steps, 20 bytes per step, prompt and weight (as in
      [`score_curves_estimate`][icdl.diffusion.budget.score_curves_estimate]).
    """
    task = cfg.task
    n, d = task.points, task.dim
    parts = [0.0]
    if "mixture_fit" in names:
        parts.append(12 * 8 * prompts * n * n * (task.components + 1))
    if "kde" in names:
        parts.append(5 * 8 * prompts * n * n * d)
    if "gd_prior" in names:
        parts.append(20 * 101 * prompts * _mlp_params(3, gd_width, d))
    return max(parts)


def score_curves_estimate(
    cfg: ScoreConfig, *, prompts: int, mlp_ks: int, mlp_epochs: int, mlp_depth: int, mlp_width: int,
    gd_steps: int, gd_width: int, resamples: int, tuned: Sequence[str] = (), tune_prompts: int = 0,
) -> Estimate:  # fmt: skip
    """``icdl score evaluate``: one ICL pass over every prompt, the context-trained network trained once per
    (prompt batch, k), plain GD on the score network, and the bootstrap over prompts."""
    task, m = cfg.task, cfg.model
    T, K = 2 * task.points, task.examples
    P = _icl_params(m, max(task.d_x, task.d_y))
    mlp = _mlp_params(mlp_depth, mlp_width, task.dim)
    gd = _mlp_params(3, gd_width, task.dim)
    flops = (
        2 * P * prompts * T
        + 6 * mlp * prompts * K * mlp_ks * mlp_epochs
        + 6 * gd * prompts * K * mlp_ks * gd_steps
    )
    flops += resamples * prompts * (K + 1) * 20
    small_steps = mlp_ks * (mlp_epochs + gd_steps)
    # The bootstrap over prompts builds a (resamples, prompts) index (int64), its counts and the ones it
    # scatters (float64) at once: 24 bytes per resample and prompt (icdl.icl.metrics.bootstrap_bands).
    # Plain GD keeps its whole weight trajectory (icdl.nets.reference_gd: the steps + 1 float64 (prompts, P)
    # iterates, then their stacked copy) for one k at a time: two copies, measured two to three with the
    # allocator's slack, so 2.5 are counted (20 bytes per step, prompt and weight).
    nbytes = (
        _BASE_BYTES
        + 8 * prompts * T * (m.d_model * m.layers * 4 + mlp_width * 4)
        + 8 * resamples * (K + 1)
        + 24 * resamples * prompts
        + (20 * (gd_steps + 1) * prompts * gd if gd_steps > 0 else 0)
        + tuning_bytes(cfg, tuned, prompts=max(prompts, tune_prompts))
    )
    return Estimate(
        "icdl score evaluate",
        float(nbytes),
        5.0
        + flops / CPU_FLOPS
        + small_steps * _STEP_OVERHEAD
        + tuning_seconds(cfg, tuned, prompts=max(prompts, tune_prompts), gd_ks=mlp_ks),
        f"{prompts} prompts x {K + 1} k; context net {mlp_epochs} epochs at {mlp_ks} k",
    )


def sampling_estimate(
    cfg: ScoreConfig, *, ks: list[int], prompts: int, samples: int, steps: int, mlp_epochs: int,
    mlp_depth: int, mlp_width: int, tuned: Sequence[str] = (), tune_prompts: int = 0,
) -> Estimate:  # fmt: skip
    """``icdl score sample``: for every prompt, k and estimator (six at most) a sampler run of ``steps``
    steps (two score evaluations each) on ``samples`` points; the ICL score attends over ``2k`` cached
    context tokens; the context-trained network is trained once per (prompt, k)."""
    task, m = cfg.task, cfg.model
    P = _icl_params(m, max(task.d_x, task.d_y))
    mlp = _mlp_params(mlp_depth, mlp_width, task.dim)
    kmax = max(ks)
    per_eval = 2 * P + 8 * m.layers * m.d_model * kmax + 2 * mlp + 40 * kmax * task.dim
    runs = prompts * len(ks)
    flops = runs * (6 * samples * steps * 2 * per_eval + 6 * mlp * kmax * mlp_epochs)
    # The MMD's median bandwidth: the (2 samples)^2 float64 distances of the pooled samples and the copy
    # the median sorts (icdl.diffusion.metrics.mmd): 64 bytes per squared sample.
    nbytes = (
        _BASE_BYTES
        + 4 * 3 * samples * (2 * kmax + 1) * m.d_model
        + 8 * 64 * samples * task.dim
        + 64 * samples**2
        + tuning_bytes(cfg, tuned, prompts=tune_prompts)
    )
    return Estimate(
        "icdl score sample",
        float(nbytes),
        5.0
        + flops / CPU_FLOPS
        + runs * (6 + len(tuned)) * 2 * steps * _STEP_OVERHEAD
        + runs * mlp_epochs * _STEP_OVERHEAD
        + tuning_seconds(cfg, tuned, prompts=tune_prompts, gd_ks=len(ks)),
        f"{prompts} prompts x {len(ks)} k x {6 + len(tuned)} estimators x {samples} samples x {steps} steps",
    )


def score_construct_estimate(dim: int, depth: int, width: int, *, examples: int, steps: int) -> Estimate:
    """``icdl score construct``: compiling GD on the DSM loss of the score network (float64, paper
    variant, no projection) and verifying it on one prompt — the same closed-form sizes as
    ``icdl construct``
    ([`icdl.construct.estimate.construction_estimate`][icdl.construct.estimate.construction_estimate]), since
    it is that construction for the spec
    [`icdl.diffusion.construct.score_net_spec`][icdl.diffusion.construct.score_net_spec]."""
    # here, not at the top: the compiler and its variants (torch included) load only for this estimate; the
    # training, evaluation and sampling estimates above are read before any of that is needed
    from icdl.construct.estimate import construction_estimate
    from icdl.diffusion.construct import score_net_spec

    est = construction_estimate(score_net_spec(dim, depth, width), steps=steps, examples=examples)
    return dataclasses.replace(est, what="icdl score construct")
