"""Trainer: learning, bit-exact resume after SIGKILL, atomic checkpoints, divergence handling, load_run."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from icdl.cli import main
from icdl.config import load_config
from icdl.errors import InputError
from icdl.icl import tasks as tasks_mod
from icdl.icl.training.train import TrainingDiverged, find_checkpoint, load_run, lr_at, train

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def records(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def weights(run: Path) -> dict[str, torch.Tensor]:
    ck = find_checkpoint(run)
    assert ck is not None
    return load_file(str(ck / "model.safetensors"))


def assert_same_state(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    sa = torch.load(find_checkpoint(a) / "state.pt", weights_only=True)  # type: ignore[operator]
    sb = torch.load(find_checkpoint(b) / "state.pt", weights_only=True)  # type: ignore[operator]
    assert sa["step"] == sb["step"]
    for pid, st in sa["optimizer"]["state"].items():
        for name, val in st.items():
            assert torch.equal(val, sb["optimizer"]["state"][pid][name]), (pid, name)


def test_lr_schedule() -> None:
    cfg = load_config("tiny", ["train.warmup=10", "train.lr=1.0", "train.steps=110"])
    assert lr_at(cfg, 0) == pytest.approx(0.1) and lr_at(cfg, 9) == pytest.approx(1.0)
    assert lr_at(cfg, 50) == 1.0 and lr_at(cfg, 109) == 1.0
    cos = load_config("tiny", ["train.warmup=10", "train.lr=1.0", "train.steps=110", "train.schedule=cosine",
                               "train.min_lr_ratio=0.1"])  # fmt: skip
    assert lr_at(cos, 10) == pytest.approx(1.0)
    assert lr_at(cos, 60) == pytest.approx(0.55)  # halfway: (1 + 0.1) / 2
    assert lr_at(cos, 110) == pytest.approx(0.1)
    vals = [lr_at(cos, s) for s in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(vals))


def test_tiny_run_learns_and_writes_a_run_dir(tmp_path: Path) -> None:
    run = tmp_path / "tiny"
    res = train(load_config("tiny", ["train.threads=1"]), run, quiet=True)
    assert res.step == 200 and res.start_step == 0
    recs = records(run)
    assert [r["step"] for r in recs] == list(range(10, 201, 10))
    for key in ("step", "loss", "lr", "examples_per_s", "y_var"):
        assert key in recs[0]
    first, last = recs[0], recs[-5:]
    y_var = sum(r["y_var"] for r in last) / 5
    loss = sum(r["loss"] for r in last) / 5
    assert first["loss"] > 0.7 * first["y_var"]  # starts at the trivial level
    assert loss < 0.45 * y_var  # ... and falls well below the label variance
    assert res.loss == recs[-1]["loss"] and res.label_var == recs[-1]["y_var"]  # the summary's pair
    # Run directory contents: config, metrics, the final checkpoint, nothing half-written.
    assert (run / "config.yaml").is_file()
    ck = find_checkpoint(run)
    assert ck is not None and ck.name == "step_0000200"
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".tmp")]
    assert len(list((run / "checkpoints").glob("step_*"))) == 1  # keep_checkpoints = 1
    # load_run gives back the trained predictor (eval mode, same weights, shared signature).
    model, cfg = load_run(run)
    assert not model.training and cfg == load_config("tiny", ["train.threads=1"])
    for k, v in model.state_dict().items():
        assert torch.equal(v, weights(run)[k])
    b = tasks_mod.sample_batch(cfg.task, 256, seed=123, step=0)
    with torch.no_grad():
        pred = model(b.xs, b.ys)
    mse = ((pred - b.ys)[:, 1:] ** 2).mean()  # positions with at least one example
    assert mse < 0.5 * b.ys.var()
    # Running again is a no-op: the run is complete.
    again = train(load_config("tiny", ["train.threads=1"]), run, quiet=True)
    assert again.start_step == 200 and len(records(run)) == len(recs)


def test_resume_with_more_steps_equals_a_longer_run(tmp_path: Path) -> None:
    base = ["train.threads=1", "train.checkpoint_every=4", "train.log_every=2", "train.keep_checkpoints=2"]
    train(load_config("tiny", [*base, "train.steps=30"]), tmp_path / "long", quiet=True)
    train(load_config("tiny", [*base, "train.steps=18"]), tmp_path / "short", quiet=True)
    assert sorted(p.name for p in (tmp_path / "short" / "checkpoints").glob("step_*")) == [
        "step_0000016",
        "step_0000018",
    ]
    res = train(load_config("tiny", [*base, "train.steps=30"]), tmp_path / "short", quiet=True)
    assert res.start_step == 18
    assert_same_state(tmp_path / "long", tmp_path / "short")
    steps = [r["step"] for r in records(tmp_path / "short")]
    assert steps == sorted(set(steps))


def test_resume_config_mismatch_is_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "r"
    train(load_config("tiny", ["train.steps=4", "train.threads=1"]), run, quiet=True)
    before = sorted(str(p) for p in run.rglob("*"))
    for bad in (["model.attention=softmax"], ["train.lr=0.5"], ["train.schedule=cosine"]):
        with pytest.raises(SystemExit) as info:
            main(
                [
                    "train",
                    "tiny",
                    "--out",
                    str(run),
                    "-q",
                    "--set",
                    "train.steps=4",
                    *[arg for b in bad for arg in ("--set", b)],
                ]
            )
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "does not match" in err
    assert sorted(str(p) for p in run.rglob("*")) == before
    # A non-empty directory that is not a run is refused too.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="non-empty"):
        train(load_config("tiny"), other, quiet=True)


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tasks_mod.sample_batch

    def poisoned(*args: object, **kwargs: object) -> tasks_mod.PromptBatch:
        b = real(*args, **kwargs)  # type: ignore[arg-type]
        if kwargs["step"] == 7:
            b.ys[0, 0, 0] = float("nan")
        return b

    monkeypatch.setattr("icdl.icl.training.train.sample_batch", poisoned)
    run = tmp_path / "nan"
    with pytest.raises(TrainingDiverged, match="step 8") as info:
        train(
            load_config("tiny", ["train.steps=20", "train.checkpoint_every=5", "train.threads=1"]),
            run,
            quiet=True,
        )
    assert "\n" not in str(info.value)
    ck = find_checkpoint(run)
    assert ck is not None and ck.name == "step_0000005"
    assert all(torch.isfinite(v).all() for v in weights(run).values())


def test_cli_non_finite_exit_3_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "blowup"
    with pytest.raises(SystemExit) as info:  # 1e30 weights overflow float32 at the first layer
        main(
            [
                "train",
                "tiny",
                "--out",
                str(run),
                "-q",
                "--set",
                "task.weight_std=1e30",
                "--set",
                "train.steps=5",
            ]
        )
    assert info.value.code == 3  # its own code: 1 is for bugs, 2 for bad input
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "non-finite loss at step 1" in err and "Traceback" not in err
    assert find_checkpoint(run) is None


def _cli(run: Path, steps: int, extra: tuple[str, ...] = ()) -> list[str]:
    sets = [
        f"train.steps={steps}",
        "train.checkpoint_every=2",
        "train.log_every=1",
        "train.threads=1",
        *extra,
    ]
    return [sys.executable, "-m", "icdl", "train", "tiny", "--out", str(run), "-q",
            *[arg for s in sets for arg in ("--set", s)]]  # fmt: skip


def test_sigkill_then_resume_is_bit_identical(tmp_path: Path) -> None:
    steps = 160
    kill_at = random.Random(os.environ.get("PYTEST_SEED", "icdl")).randint(5, 100)
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    # The reference and the resumption run in this process (one thread, like the subprocess); only the
    # run that gets killed pays a subprocess start.
    torch.set_num_threads(1)
    train(load_config("tiny", [f"train.steps={steps}", "train.checkpoint_every=2", "train.log_every=1",
                               "train.threads=1"]), ref, quiet=True)  # fmt: skip

    proc = subprocess.Popen(_cli(cut, steps), env=ENV)
    metrics = cut / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.is_file():
            lines = metrics.read_text().splitlines()
            if lines and json.loads(lines[-1]).get("step", 0) >= kill_at:
                break
        time.sleep(0.002)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    ck = find_checkpoint(cut)
    assert ck is not None
    killed_step = int(ck.name.split("_")[1])
    assert 0 < killed_step < steps

    # Resume in this process: the checkpoint written by the killed subprocess must carry everything.
    train(load_config("tiny", [f"train.steps={steps}", "train.checkpoint_every=2", "train.log_every=1",
                               "train.threads=1"]), cut, quiet=True)  # fmt: skip
    assert_same_state(ref, cut)
    got = [r["step"] for r in records(cut)]
    assert got == list(range(1, steps + 1))  # logged steps past the kill were replaced, not duplicated
    want = {r["step"]: r["loss"] for r in records(ref)}
    assert all(r["loss"] == want[r["step"]] for r in records(cut))


def test_curriculum_grows_dims_and_points(tmp_path: Path) -> None:
    cfg = load_config(
        "tiny",
        [
            "train.steps=8",
            "train.log_every=2",
            "train.threads=1",
            "train.curriculum.dims={start: 2, end: 5, inc: 1, interval: 2}",
            "train.curriculum.points={start: 4, end: 11, inc: 3, interval: 4}",
        ],
    )
    train(cfg, tmp_path / "cur", quiet=True)
    recs = records(tmp_path / "cur")
    # Logged at the end of steps 2, 4, 6, 8 (0-based steps 1, 3, 5, 7).
    assert [r["dims"] for r in recs] == [2, 3, 4, 5]
    assert [r["points"] for r in recs] == [4, 4, 7, 7]


def test_cpu_small_preset_loss_falls_well_below_label_variance(tmp_path: Path) -> None:
    """The cpu-small preset itself (model, task, optimiser; warm-up shortened so the budget fits):
    within 120 steps the loss is far below Var(y), the loss of predicting the label mean."""
    cfg = load_config(
        "cpu-small",
        ["train.steps=120", "train.warmup=40", "train.threads=1", "train.checkpoint_every=120"],
    )
    train(cfg, tmp_path / "cpu-small", quiet=True)
    last = records(tmp_path / "cpu-small")[-3:]
    loss = sum(r["loss"] for r in last) / 3
    y_var = sum(r["y_var"] for r in last) / 3
    assert loss < 0.4 * y_var
