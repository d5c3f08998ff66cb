"""Score runs have the run format of ``icdl train``: checkpoints with manifests, bit-identical resume after
SIGKILL, exit 130 on SIGINT, a lock, refusal of a changed config, of a damaged file and of an unfinished run.

The SIGKILL and SIGINT tests drive real ``icdl score train`` processes: they wait for the first checkpoint
directory, signal the process, resume it and compare the final weights with those of a run never
interrupted, tensor by tensor (``torch.equal``, i.e. bit for bit).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

# The one-line-error helpers of this folder (pytest puts tests/reliability on sys.path).
from test_bounded import assert_one_line_error, run_cli

from icdl.diffusion.config import dump_score_config, load_score_config
from icdl.diffusion.train import score_run_step, train_score
from icdl.icl.training.checkpoint import find_checkpoint
from icdl.io import portable_path

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
HOLD = "import sys, time; from icdl.runlock import RunLock; RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)"  # noqa: E501
# The smallest score model; LONG is long enough to be signalled mid-run after its first checkpoint.
SMALL = [
    "train.batch_size=8", "train.warmup=1", "model.layers=1", "model.heads=2", "model.d_model=16",
    "model.d_mlp=32", "task.examples=6", "model.max_points=7", "train.threads=1",
]  # fmt: skip
# 1,000 steps, checkpoints every 10, so the run cannot end in the gap between the test seeing the first
# checkpoint and signalling it (with 300 steps one CI run on a quiet machine exited 0: finished first).
LONG_STEPS = 1000
LONG = [
    *SMALL,
    f"train.steps={LONG_STEPS}",
    "train.checkpoint_every=10",
    "train.log_every=10",
    "train.keep_checkpoints=2",
]
SHORT = [*SMALL, "train.steps=4", "train.checkpoint_every=2", "train.log_every=2"]
EVALUATE = ["--prompts", "4", "--mlp-ks", "3", "--no-mlp", "--gd-steps", "0", "--resamples", "5", "--json"]
SAMPLE = ["--ks", "2", "--prompts", "1", "--samples", "8", "--steps", "2", "--no-mlp", "--json"]


def flip_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _train_args(run: Path, sets: list[str]) -> list[str]:
    args = [sys.executable, "-m", "icdl", "score", "train", "score-small", "--out", str(run), "--quiet"]
    for s in sets:
        args += ["--set", s]
    return args


def _train_cli(run: Path, sets: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_train_args(run, sets), capture_output=True, text=True, env=ENV, timeout=600)


def _signal_after_first_checkpoint(run: Path, sig: int) -> tuple[int, str]:
    """Start ``icdl score train`` on LONG, send ``sig`` once a checkpoint exists; (exit code, stderr)."""
    # SIGINT's default disposition in the child whatever the test runner inherited: a shell's background
    # job (`cmd &`, e.g. a CI script started with nohup) ignores SIGINT, and Python keeps an ignored SIGINT
    # ignored, so the child would never see the interrupt this test sends.
    p = subprocess.Popen(
        _train_args(run, LONG),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 300
        while not (run / "checkpoints" / "latest").is_file() and time.monotonic() < deadline:
            assert p.poll() is None, "training ended before its first checkpoint"
            time.sleep(0.005)
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, err


def _weights(run: Path) -> dict[str, torch.Tensor]:
    ck = find_checkpoint(run)
    assert ck is not None
    return load_file(str(ck / "model.safetensors"))


def _losses(run: Path) -> list[tuple[int, float]]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines)]


def _assert_same_run(run: Path, reference: Path) -> None:
    a, b = _weights(run), _weights(reference)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k  # bit for bit
    assert _losses(run) == _losses(reference)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LONG trained without interruption."""
    run = tmp_path_factory.mktemp("score-ref") / "run"
    train_score(load_score_config("score-small", LONG), run)
    return run


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("score-short") / "run"
    train_score(load_score_config("score-small", SHORT), run)
    return run


@pytest.fixture
def short_copy(short_run: Path, tmp_path: Path) -> Path:
    rd = tmp_path / "run"
    shutil.copytree(short_run, rd)
    return rd


def test_run_layout(short_run: Path) -> None:
    assert (short_run / "config.yaml").is_file() and (short_run / "metrics.jsonl").is_file()
    assert (short_run / "checkpoints" / "latest").read_text().strip() == "step_0000004"
    for ck in (short_run / "checkpoints").glob("step_*"):
        files = json.loads((ck / "manifest.json").read_text())["files"]
        assert set(files) == {"model.safetensors", "state.pt"}
    assert not (short_run / "model.safetensors").exists()
    assert score_run_step(short_run) == 4


def test_sigkill_then_resume_is_bit_identical(reference: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, _ = _signal_after_first_checkpoint(run, signal.SIGKILL)
    assert code == -signal.SIGKILL
    reached = score_run_step(run)
    assert reached is not None and 0 < reached < LONG_STEPS  # killed mid-run, after a checkpoint
    p = _train_cli(run, LONG)  # resumes, taking the lock the killed process held
    assert p.returncode == 0, p.stderr
    assert score_run_step(run) == LONG_STEPS
    _assert_same_run(run, reference)


def test_sigint_exits_130_and_the_run_resumes(reference: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, err = _signal_after_first_checkpoint(run, signal.SIGINT)
    lines = err.strip().splitlines()
    assert code == 130 and len(lines) == 1 and lines[0].startswith("icdl: error: "), err
    reached = score_run_step(run)
    assert reached is not None and 0 < reached < LONG_STEPS
    code, _, err = run_cli(["score", "evaluate", str(run), *EVALUATE])  # unfinished: refused
    assert_one_line_error(code, err, f"reached step {reached} of {LONG_STEPS}", "--allow-unfinished")
    train_score(load_score_config("score-small", LONG), run)
    _assert_same_run(run, reference)


@pytest.mark.parametrize("name", ["model.safetensors", "state.pt"])
def test_flipped_bit_refused_everywhere(short_copy: Path, name: str) -> None:
    ck = short_copy / "checkpoints" / "step_0000004"
    flip_bit(ck / name, offset=(ck / name).stat().st_size - 9)  # inside the data, past any header
    before = sorted(p.name for p in (short_copy / "checkpoints").iterdir())
    p = _train_cli(short_copy, SHORT)  # resume of the same run (finished, but verified first)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and f"{name}'" in p.stderr, p.stderr
    assert sorted(p.name for p in (short_copy / "checkpoints").iterdir()) == before  # nothing rotated
    for command, options in (("evaluate", EVALUATE), ("sample", SAMPLE)):
        code, out, err = run_cli(["score", command, str(short_copy), *options])
        assert_one_line_error(code, err, f"{name}'", "does not match its manifest")
        assert out == ""
    code, out, err = run_cli(["check", str(short_copy)])
    assert code == 2 and "FAIL" in out and name in out


def test_check_accepts_a_sound_score_run(short_run: Path) -> None:
    code, out, err = run_cli(["check", str(short_run)])
    assert code == 0, out + err
    kept = len(list((short_run / "checkpoints").glob("step_*")))
    assert "valid score config" in out and out.count("ok     ") == 2 + kept  # config, latest, checkpoints


def test_changed_config_refused_on_resume(short_copy: Path) -> None:
    before = (short_copy / "config.yaml").read_text()
    code, _, err = run_cli(
        ["score", "train", "score-small", "--out", str(short_copy), "--quiet"]
        + [a for s in [*SHORT, "train.lr=0.002"] for a in ("--set", s)]
    )
    assert_one_line_error(code, err, "config does not match the run being resumed", "train.lr")
    assert (short_copy / "config.yaml").read_text() == before


def test_finished_run_is_not_retrained(short_copy: Path) -> None:
    ck = short_copy / "checkpoints" / "step_0000004"
    stamp = (ck / "model.safetensors").stat().st_mtime_ns
    result = train_score(load_score_config("score-small", SHORT), short_copy)
    assert (result.start_step, result.loss) == (4, None)
    assert (ck / "model.safetensors").stat().st_mtime_ns == stamp


def test_second_score_train_refused_by_the_lock(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        p = _train_cli(run, SHORT)
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert f"in use by PID {holder.pid}" in p.stderr
        assert sorted(x.name for x in run.iterdir()) == [".lock"]  # nothing written by the refused run
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def _legacy_run(short_run: Path, dest: Path, step: int) -> Path:
    """A run as the previous version wrote it: config.yaml, metrics.jsonl, model.safetensors at the top."""
    dest.mkdir()
    shutil.copy(short_run / "config.yaml", dest / "config.yaml")
    weights = load_file(str(short_run / "checkpoints" / "step_0000004" / "model.safetensors"))
    save_file(weights, str(dest / "model.safetensors"), {"step": str(step)})
    return dest


def test_legacy_run_loads_with_a_note(short_run: Path, tmp_path: Path) -> None:
    run = _legacy_run(short_run, tmp_path / "old", step=4)
    code, out, err = run_cli(["score", "evaluate", str(run), *EVALUATE])
    assert code == 0, err
    assert err.count("\n") == 1 and "previous format" in err and json.loads(out)["run"] == portable_path(run)
    code, out, _ = run_cli(["check", str(run)])
    assert code == 0 and "legacy" in out
    code, _, err = run_cli(["score", "train", str(run / "config.yaml"), "--out", str(run), "--quiet"])
    assert_one_line_error(code, err, "previous format", "cannot be resumed")
    unfinished = _legacy_run(short_run, tmp_path / "old2", step=2)
    code, _, err = run_cli(["score", "sample", str(unfinished), *SAMPLE])
    assert code == 2 and "reached step 2 of 4: unfinished" in err
    assert dump_score_config(load_score_config(run / "config.yaml"))  # the config itself is sound
