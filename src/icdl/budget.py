"""Bounded work: an estimate of a command's memory and time, checked against a limit before it starts.

Every command that can be asked for arbitrarily large work (``theory``, ``approx``, ``construct``,
``train``, ``evaluate``, ``report``, ``demo``) builds an [`Estimate`][icdl.budget.Estimate] from closed-form
sizes *before* allocating anything, and [`check`][icdl.budget.check] refuses one past `MAX_BYTES` or
`MAX_SECONDS` with one line that gives the estimate (the CLI turns it into exit code 2). ``--yes`` runs it
anyway.

Estimates are deliberately simple (sizes times bytes per element; FLOPs at an assumed rate): they are
meant to be right within a small factor, which is what a refusal needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from icdl.errors import InputError

__all__ = [
    "CPU_FLOPS",
    "GPU_FLOPS",
    "MAX_BYTES",
    "MAX_SECONDS",
    "QUICK_SECONDS",
    "Estimate",
    "check",
    "format_bytes",
    "format_seconds",
]

MAX_BYTES = 4 * 2**30  # refuse estimates above 4 GiB of memory
MAX_SECONDS = 24 * 3600.0  # ... or above a day (long jobs: train, evaluate, report)
QUICK_SECONDS = 60.0  # ... or above a minute (interactive commands: theory, approx, construct)
# Assumed sustained throughputs for time estimates (dense float32 work, one process): conservative for a
# laptop core, and for a datacenter GPU.
CPU_FLOPS = 2e10
GPU_FLOPS = 2e13


@dataclass(frozen=True)
class Estimate:
    """Peak memory (bytes) and run time (seconds, None when unknown) of one piece of work.

    ``what`` names the work in the refusal message (``"icdl construct"``), ``detail`` says where the
    size comes from (``"(2N+4)L+N+1 = 513 traced states of 33 x 16.8M float64"``). Adding two estimates
    adds their times and keeps the larger memory (the parts run one after the other).
    """

    what: str
    bytes: float
    seconds: float | None = None
    detail: str = ""
    count: float | None = None  # the size the estimate is about, when it has one (e.g. ReLU-sum terms)

    def __add__(self, other: Estimate) -> Estimate:
        secs = (
            None
            if self.seconds is None and other.seconds is None
            else ((self.seconds or 0.0) + (other.seconds or 0.0))
        )
        detail = "; ".join(d for d in (self.detail, other.detail) if d)
        return Estimate(self.what, max(self.bytes, other.bytes), secs, detail)

    def describe(self) -> str:
        """``"about 7.5 GB of memory and 3 h"``."""
        out = f"about {format_bytes(self.bytes)} of memory"
        if self.seconds is not None:
            out += f" and {format_seconds(self.seconds)}"
        return out

    def too_large(self, max_seconds: float = MAX_SECONDS) -> bool:
        """Whether the estimate exceeds `MAX_BYTES` or ``max_seconds`` (NaN counts as too large)."""
        return not (self.bytes <= MAX_BYTES) or (
            self.seconds is not None and not (self.seconds <= max_seconds)
        )


def format_bytes(n: float) -> str:
    """``1.5e9 -> "1.4 GiB"``; inf -> ``"unbounded"``."""
    if not math.isfinite(n):
        return "unbounded"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def format_seconds(s: float) -> str:
    """``5400 -> "1.5 h"``; inf -> ``"forever"``."""
    if not math.isfinite(s):
        return "forever"
    for unit, scale in (("years", 365 * 86400.0), ("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s:.2g} s"


def check(est: Estimate, *, allow: bool, max_seconds: float | None = None, option: str = "--yes") -> Estimate:
    """Raise [`InputError`][icdl.errors.InputError] with the estimate when it exceeds the limits, unless
    ``allow``."""
    limit = MAX_SECONDS if max_seconds is None else max_seconds
    if est.too_large(limit) and not allow:
        detail = f" ({est.detail})" if est.detail else ""
        raise InputError(
            f"{est.what} would need {est.describe()}{detail}, above the limit of "
            f"{format_bytes(MAX_BYTES)} / {format_seconds(limit)}; pass {option} to run it anyway"
        )
    return est
