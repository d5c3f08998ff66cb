"""No traceback for a user's input (issue 34, items 4 and 5): one line on stderr, exit 2, nothing created.

Tiny ``--eps``/``--delta`` are refused by what they imply, ``--seed`` is bounded, a component too long
anywhere in an output path is found before any directory is made, standard output closed or full is one
line (a reader that closed the pipe ends the command quietly), and YAML is bounded in size, depth and
alias expansion; merge keys with an override are accepted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bounded import assert_one_line_error, run_cli

from icdl.config import load_config_data

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["approx", "sigmoid", "--eps", "5e-324"], "too small"),
        (["approx", "tanh", "--eps", "1e-310"], "too small"),
        (["approx", "softplus", "--eps", "2e-323", "--range", "3"], "too small"),
        (["approx", "relu'", "--delta", "5e-324"], "float64 resolution"),
        (["approx", "relu'", "--delta", "1e-16"], "float64 resolution"),
        (["approx", "relu'", "--delta", "1e-300", "--range", "1"], "float64 resolution"),
    ],
)
def test_tiny_eps_and_delta(args: list[str], needle: str) -> None:
    code, out, err = run_cli(args)
    assert_one_line_error(code, err, needle)
    assert "inf" not in out and "nan" not in out


@pytest.mark.parametrize(
    "command", [["score", "construct"], ["score", "evaluate", "x"], ["score", "sample", "x"]]
)
@pytest.mark.parametrize("seed", ["99999999999999999999", str(2**63)])
def test_seed_is_bounded(command: list[str], seed: str) -> None:
    code, _, err = run_cli([*command, "--seed", seed])
    assert_one_line_error(code, err, "--seed", "9223372036854775807")


LONG = "x" * 300


@pytest.mark.parametrize(
    "command",
    [
        ["train", "tiny", "--set", "train.steps=1", "--out"],
        ["score", "train", "score-small", "--set", "train.steps=1", "--out"],
        ["demo", "--out"],
        ["construct", "-L", "1", "--save"],
    ],
    ids=["train", "score-train", "demo", "construct"],
)
@pytest.mark.parametrize("where", ["middle", "end", "deep"])
def test_long_component_anywhere_creates_nothing(
    command: list[str], where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = {"middle": f"a/{LONG}/b", "end": f"a/b/{LONG}", "deep": f"a/b/c/{'y' * 256}/d/e"}[where]
    code, _, err = run_cli([*command, path])
    assert_one_line_error(code, err, "File name too long")
    assert list(tmp_path.iterdir()) == []


def test_report_long_component(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_copy: Path) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["report", str(run_copy), "--evaluate", "none", "--out", f"r/{LONG}/x"])
    assert_one_line_error(code, err, "File name too long")
    assert not (tmp_path / "r").exists()


def test_save_name_leaves_no_room_for_its_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["construct", "-L", "1", "--save", "m" * 250])
    assert_one_line_error(code, err, "temporary")
    assert list(tmp_path.iterdir()) == []


def _icdl(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "icdl", *args], text=True, stderr=subprocess.PIPE, env=ENV, timeout=120, **kw
    )  # type: ignore[call-overload]


@pytest.mark.parametrize("args", [["theory", "--steps", "2"], ["construct", "-L", "1", "--json"]])
def test_stdout_full(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        p = _icdl(args, stdout=full)
    assert_one_line_error(p.returncode, p.stderr, "standard output", "No space left on device")


@pytest.mark.parametrize("args", [["theory", "--steps", "2", "--json"], ["construct", "-L", "1", "--json"]])
def test_stdout_closed(args: list[str]) -> None:
    p = subprocess.run(
        [sys.executable, "-c", "import os, sys; os.close(1); os.execv(sys.executable, sys.argv[1:])",
         sys.executable, "-m", "icdl", *args],
        stderr=subprocess.PIPE, text=True, env=ENV, timeout=120,
    )  # fmt: skip
    assert_one_line_error(p.returncode, p.stderr, "standard output is closed")


@pytest.mark.parametrize("args", [["theory", "--steps", "2", "--json"], ["construct", "-L", "1", "--json"]])
def test_broken_pipe_is_quiet(args: list[str]) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "icdl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the first byte (like `| head -c 0`)
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0 and err == "", err


# --------------------------------------------------------------------------------------------------
# YAML: bounded, merge keys
# --------------------------------------------------------------------------------------------------


def _bomb(levels: int, width: int) -> str:
    lines = [f"l0: &l0 [{', '.join(['1'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + f"\ntask: {{depth: *l{levels - 1}}}\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "levels deep"),
        ("a: " + "[" * 70 + "]" * 70 + "\n", "levels deep"),
        ("".join(f"{' ' * i}k{i}:\n" for i in range(200)) + " " * 200 + "v: 1\n", "levels deep"),
        (_bomb(10, 9), "expands to more than"),
        (_bomb(6, 10), "expands to more than"),
        ("a: [" + "1," * 600_000 + "1]\n", "at most 1 MiB"),
    ],
    ids=["flow-5000", "flow-70", "block-200", "aliases-9^10", "aliases-10^6", "size"],
)
def test_yaml_bounded(text: str, needle: str, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    for command in (["train", str(cfg), "--print-config"], ["score", "train", str(cfg), "--print-config"]):
        code, _, err = run_cli(command)
        assert_one_line_error(code, err, needle)
        assert len(err) < 1000


def test_yaml_within_bounds_still_loads(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("a: " + "[" * 60 + "]" * 60 + f"\n{_bomb(3, 9)}")
    assert load_config_data(cfg)["task"]["depth"][0][0] == [1] * 9


def test_merge_key_with_override(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("base: &base {lr: 0.001, steps: 5}\ntrain:\n  <<: *base\n  lr: 0.01\n")
    assert load_config_data(cfg)["train"] == {"lr": 0.01, "steps": 5}
    cfg.write_text("base: &base {lr: 0.001}\ntrain:\n  <<: *base\n  lr: 0.01\n  lr: 0.02\n")
    with pytest.raises(Exception, match="duplicate key 'lr'"):
        load_config_data(cfg)
