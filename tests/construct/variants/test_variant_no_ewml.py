"""The EWML-free construction (--variant no-ewml): exact GD for ReLU networks with standard sublayers only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icdl.construct import compile_gd_transformer, load, sample_task, verify
from icdl.construct.engine.layers import EWML, ReLUAttention, ReLUMLP
from icdl.construct.variants.no_ewml import sublayers_per_step
from icdl.errors import InputError
from icdl.nets import NetSpec, forward, lemma1_terms, reference_gd

# (N, K, d_x, d_y, n, L, box): d_x != d_y throughout, N in {2, 3, 6}, with and without the box
CASES = [
    (2, 4, 3, 1, 10, 5, None),
    (2, 6, 2, 3, 9, 4, 0.5),
    (3, 5, 4, 2, 7, 3, 0.8),
    (3, 16, 8, 1, 64, 10, None),
    (6, 3, 2, 1, 8, 3, None),
    (6, 4, 5, 2, 12, 4, 0.6),
]


def _compile(N, K, dx, dy, n, L, box, **kw):
    spec = NetSpec(N, K, dx, dy, **kw)
    model = compile_gd_transformer(
        spec, lr=0.1, steps=L, n=n, projection="box" if box else "none", box=box, variant="no-ewml"
    )
    return spec, model


def _window_hits(spec, w_traj, x, delta=1e-9) -> int:
    """Example pre-activations inside the relu' window (0, delta): the only place ReLU GD may differ."""
    y0 = torch.zeros(x.shape[0], spec.out_dim, dtype=x.dtype)
    return sum(
        int(((z > 0) & (z < delta)).sum())
        for w in w_traj
        for z in lemma1_terms(spec, "squared", w, x, y0).pre
    )


@pytest.mark.parametrize("case", CASES)
def test_no_ewml_matches_reference_gd(case) -> None:
    *_, n, L, box = case
    spec, model = _compile(*case)
    x, y, xq, w0, _ = sample_task(spec, n, seed=0)
    out = model(model.build_prompt(x, y, xq, w0))
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=L, box=box)
    assert _window_hits(spec, ref, x) == 0
    W = out[0][:, model.layout.indices("W")]
    assert torch.equal(W, W[:1].expand_as(W))  # w bit-identical in every token
    scale = max(1.0, float(ref.abs().max()))
    assert float((W[-1] - ref[-1]).abs().max()) <= 1e-9 * scale
    pred, want = model.read_prediction(out)[0], forward(spec, ref[-1], xq[None])[0]
    assert float((pred - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[5]])
def test_no_ewml_verifies_sublayer_by_sublayer(case) -> None:
    spec, model = _compile(*case)
    x, y, xq, w0, _ = sample_task(spec, case[4], seed=1)
    report = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert report.passed, report.table()
    assert report.max_abs_err_weights <= 1e-9 * max(1.0, report.extra["max_abs_weight"])


@pytest.mark.parametrize("N", [2, 3, 6])
def test_no_ewml_structure(N: int) -> None:
    spec, model = _compile(N, 4, 3, 2, 6, 1, 0.5)
    paper = compile_gd_transformer(spec, lr=0.1, steps=1, n=6, projection="box", box=0.5)
    mods = [*model.block, *model.readout]
    assert not any(isinstance(m, EWML) for m in mods)
    assert all(isinstance(m, (ReLUAttention, ReLUMLP)) for m in mods)
    assert {m.info.kind for m in mods} <= {"relu_attention", "mlp"}
    assert model.sublayers_per_step == sublayers_per_step(N) == 2 * N + 3
    # the paper's N EWMLs are replaced by N - 1 sublayers (at most 2 each; E_N joins the loss MLP)
    replaced = model.sublayers_per_step - (paper.sublayers_per_step - N)
    assert replaced == N - 1 <= 2 * N
    assert model.embedding_dim == paper.embedding_dim  # same prompt format
    assert model.layout.to_dict() == paper.layout.to_dict()


def test_no_ewml_needs_a_relu_network() -> None:
    with pytest.raises(InputError, match="no-ewml"):
        _compile(2, 3, 2, 1, 4, 1, None, activation="sigmoid")


@pytest.mark.parametrize("role", ["loss_delta", "backward"])
def test_a_wrong_weight_in_a_replaced_ewml_is_named(role: str) -> None:
    """Perturb one coefficient of a sublayer that replaces an EWML: verify() names exactly that sublayer."""
    spec, model = _compile(3, 4, 3, 2, 7, 2, None)
    x, y, xq, w0, _ = sample_task(spec, 7, seed=0)
    H = model.build_prompt(x, y, xq, w0)
    index = next(i for i, m in enumerate(model.block_layers) if m.info.role == role)
    m = model.block_layers[index]
    for before_m in model.block_layers[:index]:
        H = before_m(H)
    before = m(H)
    changed = False
    for table in m.coefficient_tables():
        flat = table.view(-1)
        for k in torch.nonzero(flat).flatten().tolist():
            old = float(flat[k])
            flat[k] = old * 1.5 + 0.25
            if not torch.equal(m(H), before):
                changed = True
                break
            flat[k] = old
        if changed:
            break
    assert changed
    div = verify(model, x, y, xq, w0, lipschitz_iters=0).first_divergence
    assert div is not None
    assert (div.step, div.index, div.name) == (0, index, m.info.name)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[3] / "src")  # this checkout's code, not an installed copy
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": src}
    return subprocess.run(
        [sys.executable, "-m", "icdl", "construct", *args], capture_output=True, text=True, env=env
    )


def test_cli_no_ewml_json_has_the_paper_keys_and_save_load_is_bit_exact(tmp_path: Path) -> None:
    args = ("--json", "-N", "3", "-K", "3", "--in-dim", "3", "--out-dim", "2", "-L", "2", "-n", "5")
    runs = {v: _cli(*args, "--variant", v, "--save", str(tmp_path / v)) for v in ("paper", "no-ewml")}
    for r in runs.values():
        assert r.returncode == 0, r.stderr
    d, ref = json.loads(runs["no-ewml"].stdout), json.loads(runs["paper"].stdout)
    assert set(d) == set(ref)
    assert d["variant"] == "no-ewml" and d["passed"] is True and d["max_abs_err_weights"] <= 1e-12
    assert d["sublayers_per_step"] == 9 and d["embedding_dim"] == ref["embedding_dim"]
    model = load(tmp_path / "no-ewml")
    spec = model.spec
    x, y, xq, w0, _ = sample_task(spec, 5, seed=0)
    H = model.build_prompt(x, y, xq, w0)
    again = compile_gd_transformer(spec, steps=2, n=5, variant="no-ewml")
    assert torch.equal(model(H), again(H))


def test_cli_no_ewml_rejects_smooth_activations_in_one_line() -> None:
    r = _cli("--variant", "no-ewml", "--activation", "tanh", "-N", "2", "-K", "2", "-L", "1")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no-ewml" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("case", [CASES[1], CASES[3], CASES[5]])
def test_no_ewml_equals_the_paper_variant_bit_for_bit(case) -> None:
    """The gates replace the EWML's multiplication by r' in {0, 1} exactly, and the gate pairs are added
    before the products in the EWML's order: every state after a block is bit-identical."""
    *_, n, L, box = case
    spec, model = _compile(*case)
    paper = compile_gd_transformer(
        spec, lr=0.1, steps=L, n=n, projection="box" if box else "none", box=box, variant="paper"
    )
    x, y, xq, w0, _ = sample_task(spec, n, seed=3)
    H = model.build_prompt(x, y, xq, w0)
    assert torch.equal(model(H), paper(H))
