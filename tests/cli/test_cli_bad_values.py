"""Property: every numeric option of every command, given a generated bad or oversized value, answers with
exit code 2 and ONE line on stderr, no traceback, and writes no file.

"Bad" values are out of range, not numbers, NaN/inf, or beyond the integer ceiling; "oversized" values are
valid but ask for far more work than the limits allow, so the estimate (icdl.budget) must refuse them
before anything runs. In-process (fast); tests/cli/test_cli_fresh.py runs a few in real subprocesses.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icdl.cli import main
from icdl.cli._common import MAX_COUNT
from icdl.config import load_config
from icdl.icl.training.train import train

FAST = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


def _not_a_number() -> st.SearchStrategy[str]:
    return st.sampled_from(["abc", "", "1,5", "0x", "--", "1e", "one", "[1]", "1.5.2"])


def bad_ints(low: int, high: int = MAX_COUNT) -> st.SearchStrategy[str]:
    """Strings an integer option with bounds ``[low, high]`` must reject."""
    return st.one_of(
        st.integers(max_value=low - 1).map(str),
        st.integers(min_value=high + 1, max_value=10**400).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr).filter(lambda s: "." in s or "n" in s),
        _not_a_number(),
    )


def bad_positive_floats() -> st.SearchStrategy[str]:
    """Strings a finite-and-positive float option must reject."""
    return st.one_of(
        st.floats(max_value=0.0, allow_nan=False).map(repr),
        st.sampled_from(["nan", "inf", "-inf", "1e400", "-1e400", "NaN", "0", "-0.0"]),
        _not_a_number(),
    )


def oversized(low: int = 10**9) -> st.SearchStrategy[str]:
    return st.integers(min_value=low, max_value=MAX_COUNT).map(str)


def _snapshot(*roots: Path) -> dict[str, tuple[int, float]]:
    out = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                st_ = p.stat()
                out[str(p)] = (st_.st_size, st_.st_mtime)
    return out


def check_refused(args: list[str], *roots: Path) -> str:
    before = _snapshot(*roots)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exc:
        main(args)
    text = err.getvalue()
    assert exc.value.code == 2, (args, text, out.getvalue()[:500])
    assert text.count("\n") == 1 and text.startswith("icdl: error: "), (args, text)
    assert "Traceback" not in text
    assert _snapshot(*roots) == before, args
    return text


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("badvalues") / "tiny"
    train(load_config("tiny", ["train.steps=2", "train.checkpoint_every=2"]), run, quiet=True)
    return run


THEORY = ["theory", "--depth", "3", "--width", "4", "--in-dim", "2", "--out-dim", "1", "--steps", "1"]
THEORY_INTS = {"--depth": 2, "--width": 1, "--in-dim": 1, "--out-dim": 1, "--steps": 1, "--examples": 1}
THEORY_FLOATS = [
    "--eps",
    "--range",
    "--lr",
    "--bound-x",
    "--bound-y",
    "--bound-v",
    "--grad-lipschitz",
    "--grad-eps",
]
CONSTRUCT = ["construct", "--depth", "2", "--width", "2", "--in-dim", "2", "--steps", "1", "--examples", "3"]
CONSTRUCT_INTS = {
    "--depth": 2,
    "--width": 1,
    "--in-dim": 1,
    "--out-dim": 1,
    "--steps": 0,
    "--examples": 1,
    "--seed": 0,
}
CONSTRUCT_FLOATS = ["--lr", "--eps", "--range", "--delta", "--tol"]
EVAL_INTS = {
    "--prompts": 2, "--seed": 0, "--resamples": 10, "--mlp-prompts": 2, "--mlp-width": 1, "--mlp-epochs": 1,
    "--gd-steps": 1, "--gd-prompts": 2,
}  # fmt: skip


@pytest.mark.parametrize("option", list(THEORY_INTS))
@FAST
@given(data=st.data())
def test_theory_bad_ints(option: str, data: st.DataObject, cwd: Path) -> None:
    value = data.draw(bad_ints(THEORY_INTS[option]))
    check_refused([*THEORY, option, value], cwd)


@pytest.mark.parametrize("option", THEORY_FLOATS)
@FAST
@given(value=bad_positive_floats())
def test_theory_bad_floats(option: str, value: str, cwd: Path) -> None:
    check_refused([*THEORY, option, value], cwd)


@pytest.mark.parametrize("option", ["--depth", "--out-dim"])
@FAST
@given(value=oversized(10**7))
def test_theory_oversized(option: str, value: str, cwd: Path) -> None:
    assert "would need about" in check_refused([*THEORY, option, value], cwd)


@pytest.mark.parametrize("option", ["--eps", "--range", "--delta"])
@FAST
@given(value=bad_positive_floats())
def test_approx_bad_floats(option: str, value: str, cwd: Path) -> None:
    check_refused(["approx", "sigmoid", option, value, "--plot", "p.png"], cwd)


@FAST
@given(eps=st.floats(min_value=1e-300, max_value=1e-9))
def test_approx_tiny_eps_refused_quickly(eps: float, cwd: Path) -> None:
    check_refused(["approx", "tanh", "--eps", repr(eps), "--plot", "p.png"], cwd)


@pytest.mark.parametrize("option", list(CONSTRUCT_INTS))
@FAST
@given(data=st.data())
def test_construct_bad_ints(option: str, data: st.DataObject, cwd: Path) -> None:
    value = data.draw(bad_ints(CONSTRUCT_INTS[option], 2**63 - 1 if option == "--seed" else MAX_COUNT))
    check_refused([*CONSTRUCT, option, value, "--save", "saved"], cwd)


@pytest.mark.parametrize("option", CONSTRUCT_FLOATS)
@FAST
@given(value=bad_positive_floats())
def test_construct_bad_floats(option: str, value: str, cwd: Path) -> None:
    check_refused([*CONSTRUCT, option, value, "--save", "saved"], cwd)


@pytest.mark.parametrize("option", ["--depth", "--width", "--steps", "--examples", "--in-dim", "--out-dim"])
@FAST
@given(value=oversized(10**6))
def test_construct_oversized(option: str, value: str, cwd: Path) -> None:
    assert "would need about" in check_refused([*CONSTRUCT, option, value, "--save", "saved"], cwd)


@pytest.mark.parametrize(
    "key",
    ["train.steps", "train.batch_size", "train.lr", "task.dim", "task.width", "model.layers"],
)
@FAST
@given(value=st.one_of(bad_positive_floats(), st.integers(max_value=0).map(str)))
def test_train_bad_config_values(key: str, value: str, cwd: Path) -> None:
    check_refused(["train", "tiny", "--set", f"{key}={value}", "--out", "run"], cwd)


@FAST
@given(
    value=st.one_of(
        st.integers(max_value=-1).map(str),
        st.integers(min_value=2**63, max_value=10**400).map(str),
        st.sampled_from(["nan", "inf", "abc", "1.5"]),
    )
)
def test_train_bad_seed(value: str, cwd: Path) -> None:
    check_refused(["train", "tiny", "--set", f"train.seed={value}", "--out", "run"], cwd)


@pytest.mark.parametrize(
    "key", ["train.steps", "train.batch_size", "task.width", "task.depth", "model.d_model", "model.layers"]
)
@FAST
@given(value=oversized(10**8))
def test_train_oversized(key: str, value: str, cwd: Path) -> None:
    # model.d_model must stay divisible by the heads: a power of two keeps it so.
    v = str(2 ** (len(value) * 3)) if key == "model.d_model" else value
    assert "would need about" in check_refused(["train", "tiny", "--set", f"{key}={v}", "--out", "run"], cwd)


@FAST
@given(value=st.one_of(bad_ints(1), oversized(10**10)))
def test_demo_steps(value: str, cwd: Path) -> None:
    check_refused(["demo", "--steps", value, "--out", "demo"], cwd)


@pytest.mark.parametrize("option", list(EVAL_INTS))
@FAST
@given(data=st.data())
def test_evaluate_bad_ints(option: str, data: st.DataObject, run_dir: Path, cwd: Path) -> None:
    value = data.draw(bad_ints(EVAL_INTS[option]))
    check_refused(["evaluate", str(run_dir), option, value], cwd, run_dir)


@pytest.mark.parametrize("option", ["--prompts", "--resamples", "--mlp-width", "--mlp-epochs", "--gd-steps"])
@FAST
@given(value=oversized(10**9))
def test_evaluate_oversized(option: str, value: str, run_dir: Path, cwd: Path) -> None:
    assert "would need about" in check_refused(["evaluate", str(run_dir), option, value], cwd, run_dir)


@FAST
@given(value=st.one_of(bad_positive_floats(), st.just("0")))
def test_evaluate_bad_mlp_lr(value: str, run_dir: Path, cwd: Path) -> None:
    check_refused(["evaluate", str(run_dir), "--mlp-lr", value], cwd, run_dir)


@FAST
@given(value=st.sampled_from(["0", "-1", "a", ",", "1,,x", "1.5"]))
def test_evaluate_bad_mlp_ks(value: str, run_dir: Path, cwd: Path) -> None:
    check_refused(["evaluate", str(run_dir), "--mlp-ks", value], cwd, run_dir)


@FAST
@given(value=st.one_of(bad_ints(2), oversized(10**9)))
def test_report_prompts(value: str, run_dir: Path, cwd: Path) -> None:
    check_refused(["report", str(run_dir), "--prompts", value, "--out", "rep"], cwd, run_dir)


@FAST
@given(
    radius=st.one_of(st.floats(min_value=1e9, max_value=1e308), st.floats(min_value=1e-308, max_value=1e-7)),
    target=st.sampled_from(["sigmoid", "tanh'", "softplus"]),
)
def test_extreme_ranges_of_fitted_sums(radius: float, target: str, cwd: Path) -> None:
    check_refused(["approx", target, "--range", repr(radius), "--plot", "p.png"], cwd)
    base = ["--activation", target.rstrip("'"), "--range", repr(radius)]
    check_refused([*THEORY, *base], cwd)
    check_refused([*CONSTRUCT, *base, "--save", "saved"], cwd)
