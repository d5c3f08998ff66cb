"""`icdl approx`: JSON and text output, PNG plot, and one-line exit-2 errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icdl.cli import main
from icdl.relu_sums import target_function


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "approx", "tanh", "--eps", "1e-2", "--range", "5", "--json")
    assert code == 0 and err == ""
    d = json.loads(out)
    for key in (
        "num_terms",
        "coef_mass",
        "sup_error",
        "terms",
        "target",
        "range",
        "eps",
        "max_abs_a",
        "exact",
    ):
        assert key in d
    assert d["target"] == "tanh" and d["range"] == 5.0 and d["eps"] == 0.01 and d["exact"] is False
    assert d["num_terms"] == len(d["terms"]) and d["sup_error"] <= 0.01
    # the printed terms reproduce tanh to eps
    terms = torch.tensor(d["terms"], dtype=torch.float64)
    t = torch.linspace(-5, 5, 10_001, dtype=torch.float64)
    s = torch.relu(t[:, None] * terms[:, 0] + terms[:, 1]) @ terms[:, 2]
    assert float((s - torch.tanh(t)).abs().max()) <= 0.01


def test_defaults_and_text_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "approx", "sigmoid")
    assert code == 0
    assert "sigmoid on [-10, 10]" in out and "eps=0.001" in out and "terms H" in out and "sup error" in out


def test_exact_relu_deriv_with_delta(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "approx", "relu'", "--delta", "0.5", "--json")
    d = json.loads(out)
    assert code == 0 and d["exact"] is True and d["eps"] == 0.0
    assert d["terms"] == [[2.0, 0.0, 1.0], [2.0, -1.0, -1.0]]  # relu(t/delta) - relu(t/delta - 1)


def test_plot_written_atomically(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "fit.png"
    code, _, _ = run_cli(capsys, "approx", "softplus'", "--eps", "0.01", "--plot", str(png))
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.png"]  # no temp file left behind


def test_plot_formats_and_dpi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    magic = {"pdf": b"%PDF", "svg": b"<?xml"}
    for fmt, head in magic.items():
        path = tmp_path / f"fit.{fmt}"
        code, _, _ = run_cli(capsys, "approx", "sigmoid", "--eps", "0.05", "--plot", str(path))
        assert code == 0 and path.read_bytes()[: len(head)] == head
    small, big = tmp_path / "a.png", tmp_path / "b.png"
    for path, dpi in ((small, "40"), (big, "160")):
        code, _, _ = run_cli(capsys, "approx", "sigmoid", "--eps", "0.05", "--plot", str(path), "--dpi", dpi)
        assert code == 0
    assert big.stat().st_size > small.stat().st_size
    code, _, err = run_cli(capsys, "approx", "sigmoid", "--plot", str(tmp_path / "x.bmp"))
    assert code == 2 and ".png, .pdf or .svg" in err and not (tmp_path / "x.bmp").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["approx", "gelu"],
        ["approx", "sigmoid", "--eps", "0"],
        ["approx", "sigmoid", "--eps", "-1e-3"],
        ["approx", "sigmoid", "--eps", "abc"],
        ["approx", "sigmoid", "--eps", "nan"],
        ["approx", "sigmoid", "--range", "0"],
        ["approx", "sigmoid", "--range", "-2"],
        ["approx", "sigmoid", "--range", "ten"],
        ["approx", "relu'", "--delta", "0"],
        ["approx", "sigmoid", "--plot", "/nonexistent-dir-icdl/x.png"],
        ["approx"],
    ],
)
def test_bad_input_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    if args != ["approx"]:  # a missing argument is a usage error too
        assert len(err.strip().splitlines()) == 1 and err.startswith("icdl: error: ")
    assert "Traceback" not in err


def test_plot_path_is_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "approx", "tanh", "--eps", "0.1", "--plot", str(tmp_path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_subprocess_end_to_end() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "icdl", "approx", "sigmoid'", "--eps", "1e-2", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    d = json.loads(ok.stdout)
    t = torch.linspace(-10, 10, 4001, dtype=torch.float64)
    terms = torch.tensor(d["terms"], dtype=torch.float64)
    s = torch.relu(t[:, None] * terms[:, 0] + terms[:, 1]) @ terms[:, 2]
    assert float((s - target_function("sigmoid'")(t)).abs().max()) <= 1e-2
    bad = subprocess.run(
        [sys.executable, "-m", "icdl", "approx", "nope"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
