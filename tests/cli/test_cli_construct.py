"""`icdl construct`: JSON contract, table/explain output, --save, one-line exit-2 errors, exit 4 on
DEGENERATE and 5 on FAIL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from icdl.cli import main
from icdl.construct import load

KEYS = {
    "sublayers",
    "sublayers_per_step",
    "readout_sublayers",
    "embedding_dim",
    "max_heads",
    "parameters",
    "nonzero_parameters",
    "max_abs_err_weights",
    "max_abs_err_prediction",
    "delta_window_count",
    "corollary_bound_measured",
    "corollary_bound_budget",
    "grad_budget",
    "failures",
    "seconds_compile",
    "seconds_forward",
    "seconds_reference",
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")  # this checkout's code, not an installed copy
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": src}
    return subprocess.run(
        [sys.executable, "-m", "icdl", "construct", *args], capture_output=True, text=True, env=env
    )


def test_json_contract_and_save(tmp_path) -> None:
    r = _run(
        "--json",
        "--explain",
        "-N",
        "3",
        "-K",
        "4",
        "--in-dim",
        "3",
        "--out-dim",
        "2",
        "-L",
        "3",
        "-n",
        "8",
        "--projection",
        "box",
        "--box",
        "0.8",
        "--save",
        str(tmp_path / "m"),
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) >= KEYS
    assert d["sublayers"] == 10 * 3 and d["sublayers_per_step"] == 10 and d["readout_sublayers"] == 4
    assert set(d["parameters"]) >= {"stored", "unique"}
    assert d["passed"] is True and d["delta_window_count"] == 0
    assert d["max_abs_err_weights"] <= 1e-12 and d["max_abs_err_prediction"] <= 1e-12
    assert [e["role"] for e in d["explain"][:10]] == ["forward"] * 3 + ["derivative", "loss"] + [
        "backward"
    ] * 3 + ["update", "project"]
    assert load(tmp_path / "m").summary()["embedding_dim"] == d["embedding_dim"]


def test_table_output_for_a_smooth_network() -> None:
    r = _run("-N", "2", "-K", "3", "--activation", "sigmoid", "-L", "2", "-n", "6", "--explain")
    assert r.returncode == 0, r.stderr
    assert "verdict      PASS" in r.stdout and "Corollary 1.1 bound" in r.stdout
    assert "Lemma 5" in r.stdout and "readout" in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--depth", "1"],
        ["--activation", "swish"],
        ["--loss", "hinge"],
        ["--lr", "-1"],
        ["--projection", "box"],
        ["--box", "1.0"],
        ["--variant", "nope"],
        ["--dtype", "float16"],
        ["--delta", "1e-300"],
        ["--examples", "0"],
        ["--output", "sigmoid"],
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["construct", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("icdl: error:") and "Traceback" not in err


def test_bad_input_from_a_real_process() -> None:
    r = _run("--activation", "swish")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "swish" in r.stderr


def test_save_refuses_existing_directory(tmp_path, capsys) -> None:
    (tmp_path / "m").mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["construct", "-N", "2", "-K", "2", "-L", "1", "--save", str(tmp_path / "m")])
    assert exc.value.code == 2 and "exists" in capsys.readouterr().err


@pytest.mark.parametrize("variant", ["paper", "compact"])
def test_variant_json_has_the_same_keys(variant: str) -> None:
    r = _run(
        "--json", "--variant", variant, "-N", "2", "-K", "3", "--in-dim", "3", "--out-dim", "2", "-L", "2"
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) >= KEYS | {"max_abs_err_weights", "max_abs_err_prediction", "seconds_reference", "per_step"}
    assert d["variant"] == variant and d["passed"] is True and d["max_abs_err_weights"] <= 1e-12
    assert d["sublayers_per_step"] == {"paper": 8, "compact": 7}[variant] and d["steps"] == 2


def test_explain_lists_sublayers_before_the_verification() -> None:
    r = _run("--explain", "-N", "2", "-K", "3", "-L", "1", "-n", "4")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.index("forward_1") < out.index("readout (docs/construction.md)") < out.index("step ")
    assert out.index("reads -> writes") < out.index("legend:") < out.index("verdict")
    assert "outside [-R, R] = —" in out and "None" not in out  # a check that does not apply shows "—"


def test_a_degenerate_task_exits_4_and_is_redrawn_by_default() -> None:
    """Seed 2 of this ReLU-output network draws a task on which GD never moves w (every unit dead)."""
    args = ("-N", "2", "-K", "4", "--in-dim", "3", "--out-dim", "1", "-n", "8", "-L", "3", "--seed", "2")
    raw = _run(*args, "--raw-task", "--json")
    assert raw.returncode == 4, raw.stderr
    d = json.loads(raw.stdout)
    assert d["verdict"] == "DEGENERATE" and d["degenerate"] is True and d["weights_moved"] == 0.0
    assert d["passed"] is False and d["task_draws"] == 1
    table = _run(*args, "--raw-task")
    assert table.returncode == 4 and "verdict      DEGENERATE" in table.stdout
    good = _run(*args, "--json")
    assert good.returncode == 0, good.stderr
    d = json.loads(good.stdout)
    assert d["verdict"] == "PASS" and d["weights_moved"] > 0 and d["task_draws"] > 1


# The two cases of issue 18, finding 2: a softmax prompt whose products leave their ranges, and
# docs/construction.md's softplus rows example (its w error was above what eps promises).
SOFTMAX_OUT_OF_RANGE = (
    "--variant", "softmax", "-N", "2", "-K", "3", "--in-dim", "2", "--out-dim", "1", "-n", "24", "-L", "2",
    "--lr", "0.3", "--projection", "box", "--box", "0.7", "--seed", "109",
)  # fmt: skip


def test_a_fail_exits_5_and_names_the_failed_conditions() -> None:
    r = _run(*SOFTMAX_OUT_OF_RANGE, "--json")
    assert r.returncode == 5, r.stderr
    d = json.loads(r.stdout)
    assert d["verdict"] == "FAIL" and d["passed"] is False and d["first_divergence"] is None
    assert d["out_of_range_count"] > 0
    assert any(f.startswith("(b) range") for f in d["failures"])
    assert any(f.startswith("(c) budget") for f in d["failures"])  # the step error is above its budget
    table = _run(*SOFTMAX_OUT_OF_RANGE)
    assert table.returncode == 5 and "verdict      FAIL" in table.stdout
    assert "conditions   FAILED: (b) range" in table.stdout


def _console(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script's entry (``icdl.cli.run``) with an atexit handler that says when the interpreter's
    teardown ran."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": src}
    code = (
        "import atexit, sys; atexit.register(lambda: print('TEARDOWN', file=sys.stderr)); "
        "sys.argv = ['icdl', *sys.argv[1:]]; from icdl.cli import run; run()"
    )
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)


def test_construct_exits_without_teardown_after_its_whole_output() -> None:
    """`icdl construct` skips the interpreter's teardown (torch's takes ~0.5 s) once its report is flushed,
    with its own exit code; other commands, and `main()` in process, tear down as usual."""
    args = ("-N", "2", "-K", "4", "--in-dim", "3", "--out-dim", "1", "-n", "8", "-L", "3")
    r = _console("construct", *args, "--json", "--explain")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"] == "PASS" and "TEARDOWN" not in r.stderr
    degenerate = _console("construct", *args, "--seed", "2", "--raw-task")
    assert degenerate.returncode == 4 and degenerate.stdout.rstrip().endswith("DEGENERATE")
    assert "TEARDOWN" not in degenerate.stderr
    bad = _console("construct", *args, "--lr", "-1")
    assert bad.returncode == 2 and "TEARDOWN" in bad.stderr
    other = _console("--version")
    assert other.returncode == 0 and "TEARDOWN" in other.stderr


@pytest.mark.parametrize("was_enabled", [True, False])
def test_paused_gc_restores_the_collector_and_freezes_only_in_the_console(was_enabled: bool) -> None:
    import gc

    from icdl.cli import paused_gc

    frozen = gc.get_freeze_count()
    (gc.enable if was_enabled else gc.disable)()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert gc.isenabled() == was_enabled
        assert gc.get_freeze_count() == frozen  # main() in process: a test's garbage stays collectable
    finally:
        gc.enable()


def test_the_console_freezes_what_a_command_import_created() -> None:
    """In the console script's process, the objects torch's import creates are frozen (the collector does
    not walk them again); the command still runs and tears down as usual."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": src}
    code = (
        "import atexit, gc, sys; "
        "atexit.register(lambda: print('FROZEN', gc.get_freeze_count(), gc.isenabled(), file=sys.stderr)); "
        "sys.argv = ['icdl', *sys.argv[1:]]; from icdl.cli import run; run()"
    )
    args = ["theory", "--depth", "2", "--width", "3", "--in-dim", "2", "--out-dim", "1", "--steps", "1"]
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    count, enabled = r.stderr.split("FROZEN")[1].split()
    assert int(count) > 100_000 and enabled == "True"
