"""Prompt sampling for in-context learning: random bias-free N-layer networks on random inputs.

A *task* is a distribution over prompts ``(x_1, y_1, ..., x_n, y_n)`` with ``y_i = f(w, x_i) + noise``,
``f`` the paper's N-layer network ([`icdl.nets`][icdl.nets], Definition 1) and a fresh ``w`` per prompt
(docs/protocol.md, task). It is data, a [`icdl.config.TaskConfig`][icdl.config.TaskConfig], so evaluation
suites describe shifts (mixture weights, per-point or per-prompt components, weight mean shift,
standardisation) by changing fields, not code.

Reproducibility contract: the batch of training ``step`` is a pure function of ``(seed, step)`` and
the task config. [`sample_batch`][icdl.icl.tasks.sample_batch] draws the whole GLOBAL batch's random numbers
from generators seeded by ``(seed, step, stream)`` and returns the prompts
``[start, start + count)``, so one process with batch 64 sees exactly the prompts two data-parallel ranks with
32 each see. The three streams (weights, inputs, noise) are independent, so changing the input distribution
keeps the same target networks for the same seed — the shift suites compare like with like.

Usage:

```python
cfg = load_config("cpu-small").task
batch = sample_batch(cfg, 64, seed=0, step=0)     # batch.xs (64, 31, 20), batch.ys (64, 31, 1)
batch.w                                            # (64, P) target weights, P = spec.num_params
```
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from icdl.config import TaskConfig
from icdl.errors import InputError
from icdl.nets import NetSpec, forward, init_weights

__all__ = ["PromptBatch", "net_spec", "sample_batch", "sample_inputs", "stream_generator"]

_STREAMS = {"weights": 0, "inputs": 1, "noise": 2, "reference": 3, "length": 4}


@dataclass
class PromptBatch:
    """A batch of prompts and the networks that labelled them.

    Attributes:
        xs: ``(B, n, d_x)`` inputs (already centred / curriculum-masked, exactly what the model sees).
        ys: ``(B, n, d_y)`` labels.
        w: ``(B, P)`` target weights (row-major ``V_1 .. V_N``, see
            [`icdl.nets.unflatten`][icdl.nets.unflatten]).
        spec: the target network's [`icdl.nets.NetSpec`][icdl.nets.NetSpec].
        label_shift, label_scale: ``(B, 1, d_y)``: ``ys = (f(w, xs) - label_shift) / label_scale + noise``
            (zeros and ones unless ``standardize: task``).
    """

    xs: Tensor
    ys: Tensor
    w: Tensor
    spec: NetSpec
    label_shift: Tensor
    label_scale: Tensor


def net_spec(cfg: TaskConfig) -> NetSpec:
    """The target network of a task config."""
    return NetSpec(cfg.depth, cfg.width, cfg.dim, cfg.out_dim, cfg.activation, cfg.output)


def stream_generator(
    seed: int, step: int, stream: str, device: torch.device | str = "cpu"
) -> torch.Generator:
    """A torch generator for one random stream of one step, seeded by hashing ``(seed, step, stream)``
    with numpy's SeedSequence (so nearby seeds and steps give unrelated streams)."""
    state = np.random.SeedSequence([seed, step, _STREAMS[stream]]).generate_state(2, dtype=np.uint32)
    g = torch.Generator(device=device)
    g.manual_seed(int(state[0]) << 31 ^ int(state[1]))
    return g


def sample_inputs(
    cfg: TaskConfig,
    shape: tuple[int, int],
    generator: torch.Generator,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> Tensor:
    """Draw inputs of shape ``(*shape, d)`` = (prompts, points, d) from ``cfg.inputs``.

    Gaussian mixtures draw the component per point or per prompt; the random numbers are drawn in a
    fixed order for the full shape, so slicing prompts afterwards is exact.
    """
    ic = cfg.inputs
    B, n = shape
    d = cfg.dim
    if ic.kind == "uniform":
        u = torch.rand((B, n, d), generator=generator, dtype=dtype, device=device)
        x = ic.low + (ic.high - ic.low) * u
    else:
        z = torch.randn((B, n, d), generator=generator, dtype=dtype, device=device)
        means = torch.tensor(ic.means, dtype=dtype, device=device)
        if len(means) == 1:
            mu = means[0]
        else:
            cdf = torch.tensor(np.cumsum(ic.mixture_weights)[:-1], dtype=dtype, device=device)
            u = torch.rand(
                (B, n if ic.per == "point" else 1), generator=generator, dtype=dtype, device=device
            )
            comp = torch.searchsorted(cdf, u.contiguous(), right=True)
            mu = means[comp].unsqueeze(-1)  # (B, n or 1, 1)
        x = mu + ic.std * z
    if ic.center:
        x = x - ic.population_mean
    return x


def _task_standardisation(spec: NetSpec, w: Tensor, ref: Tensor) -> tuple[Tensor, Tensor]:
    """Per-task label shift and scale: mean and std of ``f(w, ref)`` over the reference inputs."""
    fr = forward(spec, w, ref)
    shift = fr.mean(dim=1, keepdim=True)
    # A constant network (e.g. a dead ReLU net) has std 0: keep its labels centred, unscaled.
    std = fr.std(dim=1, keepdim=True)
    return shift, torch.where(std > 1e-12, std, torch.ones_like(std))


def sample_batch(
    cfg: TaskConfig,
    batch_size: int,
    *,
    seed: int,
    step: int = 0,
    points: int | None = None,
    active_dims: int | None = None,
    start: int = 0,
    count: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> PromptBatch:
    """Sample prompts ``[start, start + count)`` of the global batch of ``batch_size`` prompts for ``step``.

    Args:
        cfg: the task.
        batch_size: size of the GLOBAL batch the random numbers are drawn for.
        seed, step: identify the batch (same pair -> same prompts, on any number of processes).
        points: points per prompt (default ``cfg.examples + 1``).
        active_dims: curriculum: keep the first ``active_dims`` input coordinates, zero the rest
            (before labelling, as Garg et al.).
        start, count: the slice of the global batch to return (default: all of it).
        dtype, device: where to sample (the generators live on ``device``).

    Returns:
        [`PromptBatch`][icdl.icl.tasks.PromptBatch] with ``xs (count, n, d)``, ``ys (count, n, d_y)``, ``w
        (count, P)``.
    """
    n = cfg.points if points is None else points
    count = batch_size - start if count is None else count
    if n < 1:
        raise InputError(f"prompts need at least 1 point, got {n}")
    if not (start >= 0 and count >= 0 and start + count <= batch_size):
        raise InputError(f"slice [{start}, {start + count}) is outside a batch of {batch_size}")
    spec = net_spec(cfg)
    sl = slice(start, start + count)
    # Draw for the whole global batch (fixed order), then slice: exact across process counts.
    w = init_weights(
        spec,
        (batch_size,),
        generator=stream_generator(seed, step, "weights", device),
        mean=cfg.weight_mean,
        std=cfg.weight_std,
        fan_in_scaling=cfg.fan_in_scaling,
        dtype=dtype,
        device=device,
    )[sl]
    xs = sample_inputs(
        cfg, (batch_size, n), stream_generator(seed, step, "inputs", device), dtype=dtype, device=device
    )[sl]
    if active_dims is not None and active_dims < cfg.dim:
        xs = xs.clone()
        xs[..., active_dims:] = 0
    f = forward(spec, w, xs)
    if cfg.standardize == "task":
        ref = sample_inputs(
            cfg,
            (batch_size, cfg.standardize_points),
            stream_generator(seed, step, "reference", device),
            dtype=dtype,
            device=device,
        )[sl]
        if active_dims is not None and active_dims < cfg.dim:
            ref[..., active_dims:] = 0
        shift, scale = _task_standardisation(spec, w, ref)
    else:
        shift = torch.zeros((count, 1, cfg.out_dim), dtype=dtype, device=device)
        scale = torch.ones_like(shift)
    ys = (f - shift) / scale
    if cfg.noise_std > 0:
        noise = torch.randn(
            (batch_size, n, cfg.out_dim),
            generator=stream_generator(seed, step, "noise", device),
            dtype=dtype,
            device=device,
        )[sl]
        ys = ys + cfg.noise_std * noise
    return PromptBatch(xs=xs, ys=ys, w=w, spec=spec, label_shift=shift, label_scale=scale)
