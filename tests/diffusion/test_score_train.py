"""The score trainer resumes bit-identically: interrupted at any step and resumed, its weights, optimizer
state and logged losses equal those of a run never interrupted (a plain uninterrupted loop is the
reference). Real processes killed by signals: tests/reliability/test_score_runs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import icdl.diffusion.train as score_train
from icdl.diffusion.config import load_score_config
from icdl.icl.training.checkpoint import find_checkpoint

TINY = [
    "train.steps=6", "train.log_every=2", "train.checkpoint_every=2", "train.batch_size=8", "train.warmup=1",
    "model.layers=1", "model.heads=2", "model.d_model=16", "model.d_mlp=32", "task.examples=6",
    "model.max_points=7", "train.threads=1", "model.dropout=0.1",
]  # fmt: skip


def _final(run: Path) -> tuple[dict[str, torch.Tensor], dict[str, object], list[tuple[int, float]]]:
    ck = find_checkpoint(run)
    assert ck is not None and ck.name == "step_0000006"
    state = torch.load(ck / "state.pt", weights_only=True)
    lines = [json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [(r["step"], r["loss"]) for r in lines]
    return load_file(str(ck / "model.safetensors")), state["optimizer"], losses


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("score-train") / "ref"
    score_train.train_score(load_score_config("score-small", TINY), run)
    return run


@pytest.mark.parametrize("stop_at", [3, 4])  # between checkpoints, and just after one
def test_interrupted_and_resumed_equals_uninterrupted(
    reference: Path, tmp_path: Path, stop_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = score_train.sample_score_batch

    def interrupting(*args: object, step: int = 0, **kwargs: object) -> object:
        if step == stop_at:
            raise KeyboardInterrupt
        return real(*args, step=step, **kwargs)  # type: ignore[arg-type]

    run = tmp_path / "run"
    monkeypatch.setattr(score_train, "sample_score_batch", interrupting)
    with pytest.raises(KeyboardInterrupt):
        score_train.train_score(load_score_config("score-small", TINY), run)
    monkeypatch.undo()
    assert score_train.score_run_step(run) == stop_at - stop_at % 2
    result = score_train.train_score(load_score_config("score-small", TINY), run)
    assert result.start_step == stop_at - stop_at % 2
    w, opt, losses = _final(run)
    w_ref, opt_ref, losses_ref = _final(reference)
    assert w.keys() == w_ref.keys() and all(torch.equal(w[k], w_ref[k]) for k in w)
    st, st_ref = opt["state"], opt_ref["state"]  # type: ignore[index]
    assert all(torch.equal(st[i]["exp_avg_sq"], st_ref[i]["exp_avg_sq"]) for i in st_ref)
    assert losses == losses_ref and len(losses) == 3
