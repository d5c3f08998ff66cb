"""Bookkeeping of the training loop ([`icdl.icl.training.train`][icdl.icl.training.train]): interval
statistics and their logging.

[`Interval`][icdl.icl.training.interval.Interval] accumulates, between two logs, the loss, the label sums and
the non-finite count of every step on the device (no host synchronisation per step);
[`Log`][icdl.icl.training.interval.Log] writes a logged interval to ``metrics.jsonl``, TensorBoard and the
progress bar.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from icdl.config import RunConfig
from icdl.io import AppendLog

__all__ = ["Interval", "Log"]


def _open_tensorboard(run_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print(
            "icdl: warning: train.tensorboard is set but tensorboard is not installed; skipping",
            file=sys.stderr,
        )
        return None
    return SummaryWriter(str(run_dir / "tensorboard"))


@dataclass
class Interval:
    """Statistics of one logging interval, summed over steps (and ranks, once reduced).

    They live on the device as one 5-slot float64 tensor (`tensor`; the CUDA-graph step of
    [`icdl.icl.training.fast`][icdl.icl.training.fast] accumulates into the same layout) so that a rank
    reduces them in one call and never synchronises with the host between logs. ``first_bad`` is the first
    step (1-based) whose loss was not finite, ``steps + 1`` while there is none.
    """

    sums: torch.Tensor  # loss, sum y, sum y^2, label count, non-finite count
    first_bad: torch.Tensor
    steps: int = 0  # steps since the last log
    started: float = 0.0  # perf_counter() at the start of the interval

    @classmethod
    def zeros(cls, total_steps: int, device: torch.device) -> Interval:
        sums = torch.zeros(5, device=device, dtype=torch.float64)
        first_bad = torch.full((), total_steps + 1, device=device, dtype=torch.float64)
        return cls(sums, first_bad, 0, time.perf_counter())

    def add(self, loss: torch.Tensor, ys: torch.Tensor, step: int) -> None:
        """Account one eager step: its loss (when finite) and its labels."""
        ld = loss.detach().double()
        finite = torch.isfinite(ld)
        yd = ys.detach().double()
        self.sums += torch.stack(
            (
                torch.where(finite, ld, 0.0),
                yd.sum(),
                (yd * yd).sum(),
                torch.tensor(float(yd.numel()), device=yd.device),
                (~finite).double(),
            )
        )
        self.first_bad = torch.where(
            finite,
            self.first_bad,
            torch.minimum(self.first_bad, torch.tensor(step + 1.0, device=yd.device, dtype=torch.float64)),
        )

    def reduced(self, distributed: bool) -> tuple[list[float], int]:
        """``(sums over every rank as floats, first non-finite step over every rank)``."""
        stats, bad_at = self.sums.clone(), self.first_bad.clone()
        if distributed:
            import torch.distributed as tdist

            tdist.all_reduce(stats)
            tdist.all_reduce(bad_at, op=tdist.ReduceOp.MIN)
        return [float(v) for v in stats.tolist()], int(bad_at.item())

    def reset(self) -> None:
        self.sums.zero_()  # in place: the CUDA-graph step holds this tensor
        self.steps, self.started = 0, time.perf_counter()


@dataclass
class Log:
    """Where a logged interval goes: ``metrics.jsonl``, TensorBoard, the progress bar; and the last
    logged loss, label variance and throughput (for `TrainResult`)."""

    metrics: Any
    tb: Any
    bar: Any
    loss: float | None = None
    var: float | None = None
    rate: float | None = None

    @classmethod
    def open(cls, cfg: RunConfig, run_dir: Path, is_main: bool, quiet: bool, start_step: int) -> Log:
        """Open the outputs of rank 0 (other ranks log nothing) and the progress bar."""
        tqdm = auto_tqdm()
        tb = _open_tensorboard(run_dir) if (cfg.train.tensorboard and is_main) else None
        metrics = AppendLog(run_dir / "metrics.jsonl") if is_main else None
        bar = tqdm(
            total=cfg.train.steps,
            initial=start_step,
            unit="step",
            dynamic_ncols=True,
            disable=quiet or not is_main or not sys.stderr.isatty(),
        )
        return cls(metrics, tb, bar)

    def write(self, stats: list[float], iv: Interval, record: dict[str, Any], world: int, batch: int) -> None:
        """Log one interval: ``record`` (step, lr, shape, elapsed) plus loss, label variance, rate."""
        now = time.perf_counter()
        self.loss = stats[0] / (iv.steps * world)
        # Variance of every label of the interval: the MSE of the best constant predictor.
        self.var = stats[2] / stats[3] - (stats[1] / stats[3]) ** 2
        self.rate = iv.steps * batch / max(now - iv.started, 1e-9)
        rest = {k: v for k, v in record.items() if k not in ("step", "lr")}
        record = {"step": record["step"], "loss": self.loss, "y_var": self.var, "lr": record["lr"],
                  "examples_per_s": self.rate, **rest}  # fmt: skip
        if self.metrics is not None:
            self.metrics.append(json.dumps(record))
        if self.tb is not None:
            for key in ("loss", "y_var", "lr", "examples_per_s"):
                self.tb.add_scalar(f"train/{key}", record[key], record["step"])
        self.bar.set_postfix(
            loss=f"{self.loss:.4g}", y_var=f"{self.var:.4g}", ex_s=f"{self.rate:.0f}", refresh=False
        )
        self.bar.update(iv.steps)

    def close(self) -> None:
        self.bar.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.tb is not None:
            self.tb.close()


def auto_tqdm() -> Any:
    """``tqdm.auto.tqdm`` (the notebook bar in Jupyter, else the text bar), imported without the "IProgress
    not found" warning it prints in a notebook that lacks ipywidgets (where it uses the text bar anyway):
    the executed tutorial on the docs site would show it as an error-coloured output."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        from tqdm.auto import tqdm
    return tqdm
