"""``icdl train --nproc-per-node K``: bad input is caught before any worker or process group starts (exit
2, one line, no launcher traceback), a worker's own failure code comes back to the caller, and a good run
trains data parallel (the same weights as ``torchrun``'s, checked in test_ddp.py for torchrun)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _icdl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "icdl", "train", "tiny", *args]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("override", "needle"),
    [("train.steps=yes", "train.steps"), ("model.layers=1.5", "model.layers"), ("train.stpes=3", "stpes")],
)
def test_bad_config_is_refused_before_any_worker(tmp_path: Path, override: str, needle: str) -> None:
    out = tmp_path / "run"
    proc = _icdl("--nproc-per-node", "2", "--set", override, "--out", str(out), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    # One line from the parent: no worker ran (it would print the same line once per rank) and no
    # launcher report or traceback follows.
    assert len(lines) == 1 and lines[0].startswith("icdl: error:") and needle in lines[0], proc.stderr
    assert not out.exists()


def test_worker_failure_code_comes_back(tmp_path: Path) -> None:
    """A run directory damaged after the parent's checks is refused by every worker (exit 2); the parent
    exits 2 with one summary line instead of torchrun's ChildFailedError traceback."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("task: [unterminated\n")
    proc = _icdl("--nproc-per-node", "2", "--set", "train.steps=2", "--out", str(out), timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("icdl: error: data-parallel training stopped")


@pytest.mark.slow
def test_two_workers_train(tmp_path: Path) -> None:
    out = tmp_path / "run"
    sets = ["--set", "train.steps=4", "--set", "train.checkpoint_every=2", "--set", "train.threads=1"]
    proc = _icdl("--nproc-per-node", "2", *sets, "--out", str(out), "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "checkpoints" / "step_0000004").is_dir()
    assert not proc.stderr.strip(), proc.stderr


def test_under_torchrun_the_option_is_refused(tmp_path: Path) -> None:
    env = {**ENV, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    cmd = [
        sys.executable,
        "-m",
        "icdl",
        "train",
        "tiny",
        "--nproc-per-node",
        "2",
        "--out",
        str(tmp_path / "r"),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "one launcher" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("exitcode", "want"), [(-9, 1), (-15, 1), (2, 2), (3, 3)])
def test_a_worker_killed_by_a_signal_is_reported_with_a_positive_code(
    monkeypatch: pytest.MonkeyPatch, exitcode: int, want: int
) -> None:
    """torch's elastic agent reports a worker killed by signal s as exit code -s; the launcher turns that
    into EXIT_SIGNALLED (a process exit code must be positive: -9 would become 247 in the shell) and keeps
    a worker's own positive code."""
    from torch.distributed.elastic.multiprocessing import errors
    from torch.distributed.launcher import api

    from icdl.icl.training import launch

    def fake_launch(config, entrypoint):  # type: ignore[no-untyped-def]
        def run(*args: str) -> None:
            failure = errors.ProcessFailure(local_rank=1, pid=123, exitcode=exitcode, error_file="")
            raise errors.ChildFailedError("icdl", {1: failure})

        return run

    monkeypatch.setattr(api, "elastic_launch", fake_launch)
    with pytest.raises(launch.LaunchFailed) as info:
        launch.launch(["train", "tiny"], 2)
    assert info.value.exit_code == want and info.value.exit_code > 0
    assert info.value.rank == 1
