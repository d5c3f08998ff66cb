"""Data-parallel training launched by icdl itself: ``icdl train CONFIG --nproc-per-node K``.

``torchrun`` starts its worker processes before any of icdl's code runs, so a bad config is only found
inside every worker; each prints icdl's one line and exits 2, and torchrun then reports the failure with
its own traceback and exits 1. Launching through [`launch`][icdl.icl.training.launch.launch] instead lets the
parent process validate the config, the run directory and the work estimate first (no process group is
started for bad input: exit 2), and turns a worker's failure into that worker's own exit code (2 bad
input, 3 a non-finite loss) with one line instead of the launcher's report. The workers are the same
``python -m icdl train ...`` processes torchrun would start (``--standalone``: a single node, c10d
rendezvous on a free local port, no restarts).
"""

from __future__ import annotations

import logging
import sys
import uuid
from dataclasses import dataclass

__all__ = ["LaunchFailed", "launch"]

# Exit code for a worker killed by a signal other than SIGINT (1 is reserved for bugs elsewhere; a
# worker that dies from a signal is reported, not silently mapped to success).
EXIT_SIGNALLED = 1


@dataclass
class LaunchFailed(Exception):
    """A worker failed: ``exit_code`` is the first failing worker's own code (its message was printed by
    the worker); ``rank`` is that worker's rank."""

    exit_code: int
    rank: int

    def __str__(self) -> str:
        return f"worker rank {self.rank} failed with exit code {self.exit_code}"


def launch(argv: list[str], nproc: int) -> None:
    """Run ``python -m icdl *argv`` as ``nproc`` data-parallel workers on this node (what
    ``torchrun --standalone --nproc_per_node=nproc -m icdl *argv`` does) and wait for them.

    Raises:
        LaunchFailed: with the first failing worker's exit code (a positive code it chose, e.g. 2 or 3;
            `EXIT_SIGNALLED` when it was killed by a signal).
        KeyboardInterrupt: when the launcher itself is interrupted (the workers are stopped).
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
    )
    # The agent's own INFO/WARNING chatter (rendezvous, closing signals) is not for the user; a failure
    # is reported by the worker's one line and by LaunchFailed.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
    try:
        elastic_launch(config, sys.executable)("-m", "icdl", *argv)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        code = failure.exitcode if failure.exitcode > 0 else EXIT_SIGNALLED
        raise LaunchFailed(code, rank) from None
    except SignalException:
        raise KeyboardInterrupt from None
