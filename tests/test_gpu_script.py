"""scripts/gpu_reproduce.sh in its CPU dry-run mode: every command of the GPU reproduction, at toy size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_script(timeout: int, **knobs: str) -> subprocess.CompletedProcess[str]:
    """scripts/gpu_reproduce.sh in its dry-run mode (``DRY_RUN=1``) with these knobs, this checkout's
    package and this interpreter first on PATH."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "DRY_RUN": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **knobs,
    }
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_reproduce.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_gpu_reproduce_dry_run_trains_evaluates_and_reports(tmp_path: Path) -> None:
    # toy size, but 2 trainings and the tuned baselines: 12 min at load 20
    proc = _run_script(1500, CUDA_GRAPH="1", RUNS=str(tmp_path / "runs"), OUT=str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "train.cuda_graph needs a single CUDA device" in proc.stderr
    report = (tmp_path / "report" / "report.md").read_text()
    for run in ("paper-softmax-target3", "gpu-centred"):
        rd = tmp_path / "runs" / run
        assert (rd / "checkpoints" / "latest").is_file()
        assert run in report
        ev = json.loads((rd / "eval" / "in-distribution.json").read_text())
        assert "icl" in json.dumps(ev)
    assert (tmp_path / "runs" / "gpu-centred" / "eval" / "long-prompts.json").is_file()
    cfg = (tmp_path / "runs" / "gpu-centred" / "config.yaml").read_text()
    assert "standardize: task" in cfg and "cuda_graph: true" in cfg
    timings = (tmp_path / "runs" / "timings.tsv").read_text().splitlines()
    assert len(timings) == 6 and all(line.split("\t")[1].isdigit() for line in timings)
    bench = json.loads((tmp_path / "runs" / "bench_device.json").read_text())  # the toy compiled forward
    assert [r["name"] for r in bench["rows"]] == ["toy"] and bench["rows"][0]["max_abs_err_weights"] < 1e-12
    for name in ("paper-softmax-target3", "gpu-centred"):  # the committed-curves JSON, as on the CPU
        curves = json.loads((tmp_path / "runs" / "curves" / f"{name}.json").read_text())
        assert curves["format"] == "icdl-curves-v1" and [r["train_seed"] for r in curves["runs"]] == [0]
        preds = curves["suites"]["in-distribution"]["conditions"]["train"]["predictors"]
        assert {"icl", "ridge_tuned", "kernel", "mlp_tuned"} <= set(preds)


def test_gpu_reproduce_plans_the_paper_grid_and_the_looped_runs(tmp_path: Path) -> None:
    """GRID=1 LOOPED=1 PLAN=1: every training of the paper's grid (depth 3/4/6 x ReLU/softmax attention, the
    transformer-depth sweep on both tasks) and of the looped model is resolved by ``icdl train
    --print-config`` (a bad key would exit 2 and stop the script), every evaluation is printed, and nothing
    is trained or written."""
    runs = tmp_path / "runs"
    proc = _run_script(900, PLAN="1", GRID="1", LOOPED="1", SEEDS="0", RUNS=str(runs))
    assert proc.returncode == 0, proc.stderr[-2000:]
    trains = [line for line in proc.stdout.splitlines() if line.startswith("plan: train")]
    evals = [line for line in proc.stdout.splitlines() if line.startswith("plan: evaluate")]
    names = {f"paper-{a}-target{d}-s0" for a in ("relu", "softmax") for d in (3, 4, 6)}
    names |= {f"depth-sweep-{t}-L{n}-s0" for t in ("paper", "centred") for n in (4, 6, 8, 10)}
    names |= {"gpu-centred-loops12-s0"}
    assert len(trains) == len(names) == 15
    for name in names:
        assert any(f"/{name} " in line for line in trains), name
        assert any(f"/{name} " in line for line in evals), name
    assert any("--set model.loops=12" in line and "model.loop_window=6" in line for line in trains)
    assert any("--loops 1,2,4,8,12,16,24,32" in line for line in evals)
    assert not any(runs.rglob("*.json")) and not any(runs.rglob("checkpoints"))
