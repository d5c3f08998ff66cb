"""Tests of ``icdl theory``: JSON keys and values agree with icdl.theory, the text table, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from icdl import theory as th
from icdl.cli import main
from icdl.nets import NetSpec

BASE = ["theory", "--depth", "3", "--width", "5", "--in-dim", "4", "--out-dim", "2", "--steps", "3"]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, err = run([*args, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def test_json_keys_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    r = run_json([*BASE, "--examples", "7"], capsys)
    for key in (
        "sublayers",
        "sublayers_per_step",
        "embedding_dim",
        "readout_sublayers",
        "num_params",
        "max_heads",
        "per_sublayer",
        "bounds",
        "flops",
    ):
        assert key in r
    spec = NetSpec(3, 5, 4, 2)
    tc = th.term_counts(spec)
    assert r["sublayers"] == 30 and r["sublayers_per_step"] == 10 and r["readout_sublayers"] == 4
    assert r["embedding_dim"] == th.embedding_dim(spec) == 101
    assert r["num_params"] == 55 and r["num_units"] == 12
    assert r["max_heads"] == th.max_heads(spec, tc) == 24
    assert [s["heads"] for s in r["per_sublayer"]] == [s.heads for s in th.block_table(spec, tc)]
    assert [s["role"] for s in r["readout"]] == ["forward"] * 3 + ["readout"]
    assert r["flops"]["compiled_forward"] == th.model_flops(spec, tc, examples=7, steps=3)["total"]
    assert r["flops"]["direct_gd"] == 6 * 55 * 7 * 3
    assert r["terms"] == {"r": [1, 1, 1], "r_prime": [2, 2, 2], "u": [2, 2]}
    b = r["bounds"]
    assert b["E_r"] == pytest.approx(th.lemma2_E_r(spec, lipschitz_r=1.0, bound_v=1.0))
    assert b["assumptions"]["L_r_prime"] is None  # relu' jumps: infinite, printed as null
    c = b["corollary11"]
    assert c["corrected"] <= c["loose"] <= c["as_printed"]
    assert c["corrected"] == pytest.approx(th.corollary11_bound(eps=1e-3, lr=0.1, lipschitz_f=1.0, steps=3))
    assert r["embedding_dim_closed_form"] is None  # d_x != d_y


def test_closed_form_when_square(capsys: pytest.CaptureFixture[str]) -> None:
    r = run_json(
        ["theory", "--depth", "4", "--width", "3", "--in-dim", "2", "--out-dim", "2", "--steps", "1"], capsys
    )
    assert r["embedding_dim"] == r["embedding_dim_closed_form"] == 6 * 2 + 2 * 2 * 3 + 2 * 9 + 3 * 3 * 3 + 2


def test_projection_box_and_linear_output(capsys: pytest.CaptureFixture[str]) -> None:
    none = run_json(BASE, capsys)
    box = run_json([*BASE, "--projection", "box"], capsys)
    assert box["per_sublayer"][-1]["hidden"] - none["per_sublayer"][-1]["hidden"] == 2 * 55
    lin = run_json([*BASE, "--output", "linear"], capsys)
    assert lin["terms"]["r"] == [1, 1, 2] and lin["terms"]["r_prime"] == [2, 2, 1]


def test_options_change_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    a = run_json([*BASE, "--bound-v", "2", "--bound-x", "1.5"], capsys)
    assert a["bounds"]["B_r_layers"] == pytest.approx([1.5, 3.0, 6.0, 12.0])
    assert a["bounds"]["required_ranges"]["R_1"] == pytest.approx(24.0)
    assert a["bounds"]["range_sufficient"] is False  # R_1 = 24 > --range 10
    b = run_json([*BASE, "--grad-eps", "0.01", "--grad-lipschitz", "3", "--lr", "0.2"], capsys)
    assert b["bounds"]["corollary11"]["corrected"] == pytest.approx(
        th.corollary11_bound(eps=0.01, lr=0.2, lipschitz_f=3.0, steps=3)
    )


def test_text_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(BASE, capsys)
    assert code == 0 and err == ""
    assert "embedding dim D             101" in out
    assert "sublayers (2N+4)L           30" in out
    for word in ("forward", "derivative", "loss", "backward", "update", "project", "readout", "Cor 1.1"):
        assert word in out
    assert "L_r' = inf" in out  # relu note


def test_smooth_activation_uses_relu_sums(capsys: pytest.CaptureFixture[str]) -> None:
    relu_sums = pytest.importorskip("icdl.relu_sums")
    args = ["theory", "--depth", "2", "--width", "3", "--in-dim", "2", "--out-dim", "1", "--steps", "1"]
    r = run_json([*args, "--activation", "tanh", "--eps", "1e-2", "--range", "4"], capsys)
    n_r = relu_sums.relu_sum_for("tanh", eps=1e-2, radius=4.0).num_terms
    n_rp = relu_sums.relu_sum_for("tanh'", eps=1e-2, radius=4.0).num_terms
    assert r["terms"]["r"] == [n_r, n_r] and r["terms"]["r_prime"] == [n_rp, n_rp]
    assert r["per_sublayer"][0]["heads"] == 3 * n_r
    assert r["relu_sums"]["r"]["num_terms"] == n_r and "terms" not in r["relu_sums"]["r"]
    assert 0 < r["bounds"]["sum_errors"]["eps_r"] <= 1e-2
    assert r["bounds"]["theorem1"]["C_r"] is not None  # finite for a smooth activation


@pytest.mark.parametrize(
    "extra",
    [
        ["--depth", "1"],
        ["--depth", "abc"],
        ["--width", "0"],
        ["--in-dim", "0"],
        ["--steps", "0"],
        ["--activation", "swish"],
        ["--loss", "hinge"],
        ["--eps", "0"],
        ["--eps", "-1e-3"],
        ["--eps", "abc"],
        ["--eps", "nan"],
        ["--range", "0"],
        ["--range", "-10"],
        ["--lr", "x"],
        ["--examples", "0"],
        ["--projection", "ball"],
        ["--bogus"],
    ],
)
def test_bad_input_one_line_exit_2(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*BASE, *extra], capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("icdl: error:"), err
    assert "Traceback" not in err


def test_missing_required_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["theory", "--depth", "3"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_subprocess_end_to_end() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "icdl", *BASE, "--json"], capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["sublayers"] == 30
    bad = subprocess.run(
        [sys.executable, "-m", "icdl", *BASE, "--depth", "1"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


@pytest.mark.parametrize("loss", ["huber"])
def test_fitted_loss_terms(loss: str, capsys: pytest.CaptureFixture[str]) -> None:
    relu_sums = pytest.importorskip("icdl.relu_sums")
    if not hasattr(relu_sums, "loss_derivative_sum"):
        pytest.skip("icdl.relu_sums.loss_derivative_sum not written yet")
    r = run_json([*BASE, "--loss", loss, "--eps", "1e-2", "--range", "5"], capsys)
    n_u = relu_sums.loss_derivative_sum(loss, eps=1e-2, radius=5.0).num_terms
    assert r["terms"]["u"] == [n_u, n_u]
    assert r["per_sublayer"][4]["role"] == "loss" and r["per_sublayer"][4]["hidden"] == 2 * n_u
