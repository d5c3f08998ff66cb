"""The ground-truth generator: deterministic draws, non-degenerate prompts, models that load and match
their ledger, resumable writes that refuse another prior or seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from icdl.construct.compile import with_steps
from icdl.errors import InputError
from icdl.inspect.groundtruth import Prior, draw, load, write
from icdl.inspect.ledger import ledger

SMALL = Prior(depth=(2, 3), width=(1, 2), steps=(1, 2), examples=(3, 5), prompts=2)


def test_write_load_and_labels(tmp_path: Path) -> None:
    index = write(tmp_path / "gt", 6, seed=3, prior=SMALL)
    data = json.loads(index.read_text())
    assert data["count"] == 6 and len(data["models"]) == 6
    items = list(load(tmp_path / "gt"))
    assert {g.card["variant"] for g in items} <= set(SMALL.variants)
    for g in items:
        assert g.model.config.variant == g.card["variant"] and g.model.steps == g.card["steps"]
        assert json.loads(json.dumps(ledger(g.model))) == g.ledger  # the saved ledger is the model's
        H, Hc = g.prompts["H"], g.prompts["H_corrupt"]
        assert H.shape[0] == SMALL.prompts
        Y = g.model.layout.indices("Y")
        assert torch.equal(H[..., Y], -Hc[..., Y]) and H[..., Y].abs().max() > 1e-6  # labels flipped
        others = [c for c in range(H.shape[-1]) if c not in Y]
        assert torch.equal(H[..., others], Hc[..., others])
        # GD moves the weights on every prompt (non-degenerate), and flipping the labels changes that step
        w0 = g.model.read_weights(H)
        w1 = g.model.read_weights(with_steps(g.model, 1).run(H, readout=False))
        w1x = g.model.read_weights(with_steps(g.model, 1).run(Hc, readout=False))
        assert bool(((w1 - w0).abs().amax(dim=-1) > 1e-9).all())
        assert bool(((w1 - w1x).abs().amax(dim=-1) > 1e-9).all())


def test_draws_are_deterministic(tmp_path: Path) -> None:
    a, b = draw(SMALL, 5, 2), draw(SMALL, 5, 2)
    assert a[0] == b[0]
    assert all(torch.equal(a[2][k], b[2][k]) for k in a[2])
    assert draw(SMALL, 5, 3)[0] != a[0] or not torch.equal(draw(SMALL, 5, 3)[2]["H"], a[2]["H"])


def test_resume_and_refusals(tmp_path: Path) -> None:
    out = tmp_path / "gt"
    write(out, 2, seed=1, prior=SMALL)
    first = (out / "model_0001" / "ledger.json").stat().st_mtime_ns
    write(out, 4, seed=1, prior=SMALL)  # goes on: models 2 and 3 added, 0 and 1 kept
    assert (out / "model_0001" / "ledger.json").stat().st_mtime_ns == first
    assert len(list(load(out))) == 4
    with pytest.raises(InputError, match="holds something else"):
        write(out, 4, seed=2, prior=SMALL)
    with pytest.raises(InputError, match="count must be"):
        write(tmp_path / "x", 0)
    with pytest.raises(InputError, match="depth"):
        Prior(depth=(1, 3))
    with pytest.raises(InputError):
        Prior(variants=("nope",))
