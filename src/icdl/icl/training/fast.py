"""A training step with static shapes, captured as one CUDA graph (``train.cuda_graph``).

At the paper's size the ordinary step ([`icdl.icl.training.train`][icdl.icl.training.train]) is bound by
kernel launches: a few hundred small kernels for sampling, forward, backward, clipping and AdamW, each
launched from Python. [`StaticStep`][icdl.icl.training.fast.StaticStep] makes every tensor of the step a
fixed-shape buffer so the whole step can be recorded once and replayed (``torch.cuda.CUDAGraph``):

* prompts are sampled ON the device inside the step ([`DeviceSampler`][icdl.icl.training.fast.DeviceSampler]:
  the target weights, the inputs, the standardisation reference inputs and the noise are all drawn by the
  device's default generator, which CUDA graphs support), always at the longest prompt length of the run;
* the curriculum's shorter prompts and fewer active dimensions become masks: ``dims_mask`` zeroes the
  inactive input coordinates before labelling (as [`icdl.icl.tasks.sample_batch`][icdl.icl.tasks.sample_batch]
  does) and ``points_mask`` keeps only the first ``n`` points in the loss. Because the model is causal, the
  predictions at the first ``n`` points do not depend on the padded points, so the masked loss and its
  gradient equal those of the unpadded ``n``-point prompts (``tests/icl/training/test_fast.py`` checks this)
  and one capture serves every curriculum stage;
* AdamW is fused and capturable with its learning rate a device tensor, updated in place between
  replays; the loss statistics the loop logs accumulate in device buffers, so a step needs no
  host synchronisation.

The price of padding: early curriculum stages cost as much as the last one. The price of device
sampling: the prompts are no longer the ``(seed, step)`` streams of
[`icdl.icl.tasks.sample_batch`][icdl.icl.tasks.sample_batch] but the device generator's, seeded from ``(seed,
start step)``; a resumed run is deterministic but not bit-identical to an uninterrupted one.

On a CPU nothing is captured: [`StaticStep`][icdl.icl.training.fast.StaticStep] then runs the same code
eagerly (the tests use it to check the masking); ``train.cuda_graph`` itself falls back to the ordinary loop
on CPU.

Usage:

```python
step = StaticStep(model, cfg, device, optimizer_state=None)
step.run(lr, points, dims)         # one training step (a graph replay on CUDA after warm-up)
step.sums                          # (5,) float64: loss sum, sum y, sum y^2, label count, bad count
```
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from icdl.config import Config, TaskConfig
from icdl.icl.tasks import net_spec
from icdl.nets import forward

__all__ = ["WARMUP_STEPS", "DeviceSampler", "StaticStep", "graph_seed", "longest_points"]

WARMUP_STEPS = 3
"""Eager steps (on a side stream) before the capture: they allocate the optimizer state and the
library workspaces. They are real training steps."""


def longest_points(cfg: Config) -> int:
    """The fixed prompt length of the captured step: the longest prompt any step of the run has."""
    cur = cfg.train.curriculum
    return max(cfg.task.points, cur.points.end if cur.points else 0, cfg.train.points_max or 0)


def graph_seed(seed: int, start_step: int) -> int:
    """Seed of the device generator for a (possibly resumed) graph run."""
    state = np.random.SeedSequence([seed, start_step, 7]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 31 ^ int(state[1])


class DeviceSampler:
    """Draw a batch of ``batch`` prompts of ``points`` points for ``task`` with fixed shapes, on ``device``,
    from the default generator of the device (or ``generator``): capturable in a CUDA graph.

    Same distribution as [`icdl.icl.tasks.sample_batch`][icdl.icl.tasks.sample_batch] (weights
    ``N(weight_mean, weight_std^2)``, He-scaled; Gaussian-mixture or uniform inputs, centring; per-task
    standardisation on fresh reference inputs; label noise), every constant built once on the device.
    """

    def __init__(
        self,
        task: TaskConfig,
        batch: int,
        points: int,
        device: torch.device | str,
        generator: torch.Generator | None = None,
    ) -> None:
        self.task, self.batch, self.points, self.device = task, batch, points, torch.device(device)
        self.generator = generator
        self.spec = net_spec(task)
        spec = self.spec
        D = spec.offsets
        scale = torch.ones(spec.num_params)
        if task.fan_in_scaling:
            for j in range(spec.depth):
                scale[D[j] : D[j + 1]] = math.sqrt(2.0 / spec.shapes[j][1])
        self.w_scale = scale.to(self.device)  # (P,)
        ic = task.inputs
        self.means = torch.tensor(ic.means, device=self.device)
        self.cdf = torch.tensor(np.cumsum(ic.mixture_weights)[:-1].tolist(), device=self.device)

    def inputs(self, n: int, dims_mask: Tensor) -> Tensor:
        """``(batch, n, d)`` inputs with the inactive coordinates zeroed (``dims_mask (d,)``)."""
        ic, g = self.task.inputs, self.generator
        B, d = self.batch, self.task.dim
        if ic.kind == "uniform":
            x = ic.low + (ic.high - ic.low) * torch.rand((B, n, d), generator=g, device=self.device)
        else:
            z = torch.randn((B, n, d), generator=g, device=self.device)
            if len(ic.means) == 1:
                x = ic.means[0] + ic.std * z
            else:
                u = torch.rand((B, n if ic.per == "point" else 1), generator=g, device=self.device)
                comp = torch.searchsorted(self.cdf, u, right=True)
                x = self.means[comp].unsqueeze(-1) + ic.std * z
        if ic.center:
            x = x - ic.population_mean
        return x * dims_mask

    def sample(self, dims_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(xs (B, n, d), ys (B, n, d_y), w (B, P))`` for the fixed ``n = points``."""
        t, g = self.task, self.generator
        z = torch.randn((self.batch, self.spec.num_params), generator=g, device=self.device)
        w = (t.weight_mean + t.weight_std * z) * self.w_scale
        xs = self.inputs(self.points, dims_mask)
        ys = forward(self.spec, w, xs)
        if t.standardize == "task":
            fr = forward(self.spec, w, self.inputs(t.standardize_points, dims_mask))
            std = fr.std(dim=1, keepdim=True)
            ys = (ys - fr.mean(dim=1, keepdim=True)) / torch.where(std > 1e-12, std, torch.ones_like(std))
        if t.noise_std > 0:
            ys = ys + t.noise_std * torch.randn(ys.shape, generator=g, device=self.device)
        return xs, ys, w


class StaticStep:
    """The training step with fixed shapes; on CUDA (``capture=True``) recorded once as a CUDA graph.

    Args:
        model: the module to train (already on ``device``); ``forward_module`` optionally a wrapper
            (``torch.compile``) called instead.
        cfg: the run's config (task, batch, optimiser, clipping, precision).
        device: where to train.
        optimizer_state: an AdamW ``state_dict`` to resume from (from an ordinary or a graph run).
        start_step: the first step this object runs (for the divergence bookkeeping).
        capture: record a CUDA graph after [`WARMUP_STEPS`][icdl.icl.training.fast.WARMUP_STEPS] eager steps
            (CUDA only).
        generator: a generator for the sampler (tests on CPU); default: the device's default one.
    """

    def __init__(
        self,
        model: nn.Module,
        cfg: Config,
        device: torch.device,
        *,
        forward_module: nn.Module | None = None,
        optimizer_state: dict[str, Any] | None = None,
        start_step: int = 0,
        capture: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        t = cfg.train
        self.model, self.fwd, self.cfg, self.device = model, forward_module or model, cfg, device
        self.capture = capture and device.type == "cuda"
        on_cuda = device.type == "cuda"
        self.points = longest_points(cfg)
        self.sampler = DeviceSampler(cfg.task, t.batch_size, self.points, device, generator)
        self.lr = torch.tensor(float(t.lr), device=device)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": t.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        # A tensor lr lets the captured graph read the value written before each replay.
        self.optimizer = torch.optim.AdamW(
            groups,
            lr=self.lr if on_cuda else float(t.lr),
            betas=(t.beta1, t.beta2),
            fused=on_cuda,
            capturable=on_cuda,
        )
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
            for group in self.optimizer.param_groups:  # the loaded state brings float lrs
                group["lr"] = self.lr if on_cuda else float(t.lr)
        precision = t.precision if t.precision != "auto" else ("bf16" if on_cuda else "fp32")
        self.bf16 = precision == "bf16"
        self.points_mask = torch.ones(self.points, device=device)
        self.dims_mask = torch.ones(cfg.task.dim, device=device)
        # Running sums since the last log (the loop's layout): loss, sum y, sum y^2, count, bad count.
        self.sums = torch.zeros(5, device=device, dtype=torch.float64)
        self.first_bad = torch.full((), t.steps + 1.0, device=device, dtype=torch.float64)
        self.step_count = torch.full((), float(start_step), device=device, dtype=torch.float64)
        self.loss = torch.zeros((), device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.eager_steps = 0

    # The body: every tensor it reads or writes between replays is one of the buffers above.
    def _body(self) -> None:
        xs, ys, _ = self.sampler.sample(self.dims_mask)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=False):
            m = self.cfg.model
            # a looped model: the window of its fixed loop count (cuda_graph refuses a loop curriculum)
            pred = self.fwd(xs, ys) if m.loops is None else self.fwd(xs, ys, window=m.window(m.loops))
        mask = self.points_mask.view(1, -1, 1)  # (1, N, 1)
        count = mask.sum() * ys.shape[0] * ys.shape[-1] * (pred.numel() // ys.numel())
        loss = (((pred.float() - ys) ** 2) * mask).sum() / count
        loss.backward()
        clip = self.cfg.train.grad_clip
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.optimizer.step()
        ld = loss.detach().double()
        finite = torch.isfinite(ld)
        yd = (ys.detach() * mask).double()
        self.step_count += 1
        self.sums += torch.stack(
            (torch.where(finite, ld, 0.0), yd.sum(), (yd * yd).sum(), count.double(), (~finite).double())
        )
        self.first_bad.copy_(
            torch.where(finite, self.first_bad, torch.minimum(self.first_bad, self.step_count))
        )
        self.loss.copy_(loss.detach())

    def _set(self, lr: float, points: int | None, dims: int | None) -> None:
        n = self.points if points is None else points
        d = self.cfg.task.dim if dims is None else dims
        self.points_mask.copy_((torch.arange(self.points) < n).float(), non_blocking=True)
        self.dims_mask.copy_((torch.arange(self.cfg.task.dim) < d).float(), non_blocking=True)
        if isinstance(self.optimizer.param_groups[0]["lr"], Tensor):
            self.lr.fill_(lr)
        else:
            for group in self.optimizer.param_groups:
                group["lr"] = lr

    def run(self, lr: float, points: int | None, dims: int | None) -> None:
        """One training step at learning rate ``lr`` on prompts of ``points`` points (None: the longest)
        with ``dims`` active input dimensions (None: all)."""
        self._set(lr, points, dims)
        if self.graph is not None:
            self.graph.replay()
            return
        if not self.capture:
            self.optimizer.zero_grad(set_to_none=True)
            self._body()
            return
        if self.eager_steps < WARMUP_STEPS:
            # Warm-up on a side stream, as CUDA graph capture requires.
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self.optimizer.zero_grad(set_to_none=True)
                self._body()
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.eager_steps += 1
            return
        # Record the step once (recording does not execute it), then replay it for this step.
        self.optimizer.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._body()
        self.graph.replay()
