"""One `icdl train` per run directory: a real second process gets exit 2 naming the holder's PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from icdl.config import load_config
from icdl.icl.training.train import train

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
HOLD = "import sys, time; from icdl.runlock import RunLock; RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)"  # noqa: E501


def _train_cli(run: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "icdl", "train", "tiny", "--out", str(run), "--quiet"]
    for s in ("train.steps=4", "train.checkpoint_every=2", "train.threads=1", *sets):
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=300)


def test_second_train_refused_while_first_holds_the_lock(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        p = _train_cli(run)
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and f"in use by PID {holder.pid}" in lines[0]
        assert sorted(x.name for x in run.iterdir()) == [".lock"]  # nothing written by the refused run
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # SIGKILL released the lock: training now proceeds in the same directory.
    p = _train_cli(run)
    assert p.returncode == 0, p.stderr
    assert (run / "checkpoints" / "latest").is_file()


def test_two_real_trains_on_one_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [sys.executable, "-m", "icdl", "train", "tiny", "--out", str(run), "--quiet", "--yes"]
    for s in ("train.steps=100000", "train.checkpoint_every=50", "train.threads=1"):
        args += ["--set", s]
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 120
        while not (run / "config.yaml").is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (run / "config.yaml").is_file()
        p = _train_cli(run, "train.steps=100000", "train.checkpoint_every=50")
        assert p.returncode == 2 and f"in use by PID {first.pid}" in p.stderr, p.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()


def test_lock_released_after_training(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = load_config("tiny", ["train.steps=2", "train.checkpoint_every=2", "train.threads=1"])
    train(cfg, run, quiet=True)
    train(
        load_config("tiny", ["train.steps=4", "train.checkpoint_every=2", "train.threads=1"]), run, quiet=True
    )
