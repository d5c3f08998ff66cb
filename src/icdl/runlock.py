"""One writer per run directory: an advisory ``fcntl.flock`` on ``RUN/.lock``.

``icdl train`` (and ``icdl score train``) holds the lock for the whole run, so a second one on the same
directory (which would interleave checkpoints, metrics and rotation with the first) stops at once with
exit 2, "run directory in use by PID N". The lock belongs to the open file, so the operating system
releases it when the holder exits in any way, SIGKILL included: a killed run never leaves a stale lock
behind. The file itself stays (removing it would let two processes lock two different files); it holds
the PID of the last holder, for the message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from icdl.errors import InputError
from icdl.io import file_mode

__all__ = ["LOCK_NAME", "RunLock"]

LOCK_NAME = ".lock"


class RunLock:
    """The exclusive lock of a run directory; ``acquire()`` raises InputError when another process
    holds it. Use as a context manager, or call ``release()``."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock (creating the run directory and ``.lock`` when missing), without waiting."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise InputError(
                f"run directory {str(self.path.parent)!r} in use by PID {holder} (another icdl train or "
                "icdl score train); wait for it or use another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock back (closing the file releases it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
