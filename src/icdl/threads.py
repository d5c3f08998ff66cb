"""How many intra-op threads torch gets for a piece of work (docs/benchmarks.md, "Threads").

torch's default, one thread per core, is the worst choice on a shared machine. Its OpenMP workers spin
while they wait, so next to one other busy process on 2 cores, the row construction's default command ran
8x slower than on one thread (issue 31). Two kinds of work:

* ``"small"``: many sublayers, each too small to split across threads (compiling, running and verifying a
  construction). One thread, always: on a quiet machine one thread was faster here too.
* ``"large"``: matmul-bound work (training, evaluation, tuned baselines, score estimation). One thread per
  *idle* core, where idle is the cores this process may use minus the other work running now (the larger
  of the 1-minute load average and the instantaneous count of runnable tasks, excluding this one). At least
  one thread.

A user's choice always wins: ``--threads N`` (the CLI), then ``ICDL_THREADS``, then ``OMP_NUM_THREADS``
(torch already honours that one, so it is left alone).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from icdl.errors import InputError

#: the environment variable that sets the thread count of every icdl command
ENV = "ICDL_THREADS"
Kind = Literal["small", "large"]


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count and why it was chosen (``--threads``, ``ICDL_THREADS``, ``OMP_NUM_THREADS``,
    ``small work``, ``idle cores``)."""

    threads: int
    reason: str


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def other_load() -> float:
    """How many cores' worth of other work is running now: the larger of the 1-minute load average and the
    instantaneous number of runnable tasks in ``/proc/loadavg`` minus this one (0 where neither exists)."""
    load = 0.0
    with contextlib.suppress(OSError, AttributeError):
        load = os.getloadavg()[0]
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/loadavg") as fh:
            running = int(fh.read().split()[3].split("/")[0])
        load = max(load, running - 1.0)
    return load


def idle_cores(cores: int | None = None, load: float | None = None) -> int:
    """``cores - load`` rounded to the nearest integer, between 1 and ``cores``."""
    cores = usable_cores() if cores is None else cores
    load = other_load() if load is None else load
    return max(1, min(cores, math.floor(cores - load + 0.5)))


def env_threads() -> int | None:
    """``ICDL_THREADS`` as a positive integer, None when unset or empty; InputError when it is not one."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(f"{ENV}={raw!r} must be an integer >= 1 (or unset, to choose by the work)")
    return value


def choose_threads(kind: Kind, requested: int | None = None) -> ThreadChoice:
    """The thread count for work of ``kind`` (see the module docstring for the rule and its order)."""
    if requested is not None:
        if requested < 1:
            raise InputError(f"threads must be >= 1, got {requested}")
        return ThreadChoice(requested, "--threads")
    from_env = env_threads()
    if from_env is not None:
        return ThreadChoice(from_env, ENV)
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        import torch

        return ThreadChoice(torch.get_num_threads(), "OMP_NUM_THREADS")
    if kind == "small":
        return ThreadChoice(1, "small work")
    return ThreadChoice(idle_cores(), "idle cores")


def apply_threads(kind: Kind, requested: int | None = None) -> ThreadChoice:
    """Set torch's intra-op threads by [`choose_threads`][icdl.threads.choose_threads]; returns the choice."""
    import torch

    choice = choose_threads(kind, requested)
    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    return choice


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for the block, restored after it."""
    import torch

    old = torch.get_num_threads()
    if old != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != old:
            torch.set_num_threads(old)
