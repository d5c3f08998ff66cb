"""Errors of the operating system (name too long, dangling link, file too large, bad bytes) are user
errors: exit 2, one line naming the path and the cause, nothing half-written or rotated."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from icdl.cli import main
from icdl.icl.training.checkpoint import find_checkpoint, verify_checkpoint

LONG = "x" * 300  # one path component past NAME_MAX (255) on every common file system


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    return int(exc.value.code or 0), err


def _assert_user_error(code: int, err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("icdl: error:"), err
    for n in needles:
        assert n in lines[0], err


COMMANDS = {
    "train": lambda p: ["train", "tiny", "--out", str(p), "--quiet"],
    "construct": lambda p: ["construct", "--save", str(p)],
    "approx": lambda p: ["approx", "softplus", "--plot", str(p)],
    "score": lambda p: ["score", "train", "score-small", "--out", str(p)],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_name_too_long(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run_cli(COMMANDS[command](tmp_path / LONG), capsys)
    _assert_user_error(code, err, LONG, os.strerror(36) if sys.platform == "linux" else "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_dangling_symlink(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "out.png"  # a suffix that --plot accepts
    link.symlink_to(tmp_path / "missing" / "target")
    code, err = _run_cli(COMMANDS[command](link), capsys)
    _assert_user_error(code, err, str(link), "dangling")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.png"] and link.is_symlink()


# Run `icdl train` with writes capped at FSIZE bytes; SIGXFSZ ignored so the write fails with EFBIG.
def _capped(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _train_cmd(run_dir: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "icdl", *_train_args(run_dir, steps)]


def _train_args(run_dir: Path, steps: int) -> list[str]:
    over = [f"train.steps={steps}", "train.checkpoint_every=10", "train.threads=1"]
    return ["train", "tiny", *(a for o in over for a in ("--set", o)), "--out", str(run_dir), "--quiet"]


def test_file_too_large_during_checkpoint(run_copy: Path) -> None:
    """A checkpoint write that hits EFBIG: exit 2, one line, the previous checkpoint intact and latest."""
    before = find_checkpoint(run_copy)
    assert before is not None
    digest = verify_checkpoint(before)
    assert digest is not None
    size = (before / "model.safetensors").stat().st_size
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        _train_cmd(run_copy, 30),
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=lambda: _capped(size // 2),  # the limit applies to the child only
        timeout=300,
    )
    _assert_user_error(proc.returncode, proc.stderr, "File too large", str(run_copy / "checkpoints"))
    assert "Traceback" not in proc.stderr
    assert find_checkpoint(run_copy) == before
    assert verify_checkpoint(before) == digest  # raises on any damaged file
    ck = run_copy / "checkpoints"
    assert sorted(p.name for p in ck.iterdir() if p.name.startswith(".")) == []  # no temporaries left


def test_non_utf8_metrics_on_resume(run_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unreadable metrics.jsonl stops a resume before config.yaml (or anything) is rewritten."""
    (run_copy / "metrics.jsonl").write_bytes(b'{"step": 10}\n\xff\xfe bad\n')
    config = (run_copy / "config.yaml").read_bytes()
    mtime = (run_copy / "config.yaml").stat().st_mtime_ns
    ckpts = sorted(p.name for p in (run_copy / "checkpoints").iterdir())
    code, err = _run_cli(_train_args(run_copy, 30), capsys)
    _assert_user_error(code, err, "metrics.jsonl", "UTF-8")
    assert (run_copy / "config.yaml").read_bytes() == config
    assert (run_copy / "config.yaml").stat().st_mtime_ns == mtime
    assert sorted(p.name for p in (run_copy / "checkpoints").iterdir()) == ckpts


def test_atomic_write_disk_error_is_one_line(tmp_path: Path) -> None:
    """An OSError of the system inside an atomic writer is an InputError naming the target; the old file
    stays and no temporary is left."""
    import errno

    from icdl.errors import InputError
    from icdl.io import atomic_dir, atomic_write

    target = tmp_path / "f.txt"
    target.write_text("old")

    def full(fh: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(InputError, match=r"f\.txt.*No space left"):
        atomic_write(target, full, binary=False)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
    with pytest.raises(InputError, match=r"d.*No space left"), atomic_dir(tmp_path / "d"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_metrics_log_hits_file_size_limit(tmp_path: Path) -> None:
    """``metrics.jsonl`` grows past a file-size limit during training: exit 2, one line naming it, and no
    partial line left in it (every line still parses)."""
    import json

    run_dir = tmp_path / "run"
    over = ["train.steps=200", "train.log_every=1", "train.checkpoint_every=1000", "train.threads=1"]
    cmd = [sys.executable, "-m", "icdl", "train", "tiny", *(a for o in over for a in ("--set", o))]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [*cmd, "--out", str(run_dir), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=lambda: _capped(3000),  # ~15 metric lines; config.yaml is smaller
        timeout=300,
    )
    _assert_user_error(proc.returncode, proc.stderr, "File too large", "metrics.jsonl")
    assert "Traceback" not in proc.stderr
    text = (run_dir / "metrics.jsonl").read_text()
    assert text and text.endswith("\n")
    assert all(json.loads(line)["step"] >= 1 for line in text.splitlines())


def test_append_log_cuts_back_a_short_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write the system cuts short (part of the line written) leaves the file as it was before."""
    import errno

    from icdl.errors import InputError
    from icdl.io import AppendLog

    log = AppendLog(tmp_path / "m.jsonl")
    log.append('{"step": 1}')
    real_write = os.write
    calls: list[int] = []

    def short_then_full(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data[:5])

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(InputError, match=r"m\.jsonl.*No space left"):
        log.append('{"step": 2}')
    monkeypatch.setattr(os, "write", real_write)
    log.close()
    assert (tmp_path / "m.jsonl").read_text() == '{"step": 1}\n'
