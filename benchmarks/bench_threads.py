"""Thread counts next to a busy process: the default choice (icdl.threads) against fixed thread counts.

For each command, with ``--competitors`` busy single-threaded processes (``while True: pass``) running, run
it with the default thread choice (no ``--threads``, no ``OMP_NUM_THREADS``/``ICDL_THREADS``) and with
``--threads 1 .. cores``, interleaved ``--repeats`` times, and report the median wall time of each and
``default / best``. Issue 31's target: within 1.3x of the best thread count with one competitor.

    python benchmarks/bench_threads.py --out docs/results/bench_threads.json
    python benchmarks/bench_threads.py --competitors 0 --repeats 3     # a quiet machine, for comparison

Commands: the rows default command (``icdl construct --variant rows -N 6 -K 64 --in-dim 16 --out-dim 1
-n 256 -L 50 --json``) and ``icdl train cpu-small --set train.steps=100`` (a fresh run directory each time).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from icdl.io import atomic_write_json

ROWS_DEFAULT = "construct --variant rows -N 6 -K 64 --in-dim 16 --out-dim 1 -n 256 -L 50 --json"
TRAIN_100 = "train cpu-small --set train.steps=100 --quiet"
#: exit codes of a finished command: 0 (PASS, or a training), 4 DEGENERATE, 5 FAIL, 6 INCONCLUSIVE (a verdict
#: is a result all the same; the rows default command is INCONCLUSIVE at L = 50, README "Exit codes")
VERDICT_EXITS = (0, 4, 5, 6)
COMMANDS = {"rows-default": ROWS_DEFAULT.split(" "), "train-cpu-small-100": TRAIN_100.split(" ")}


def env_without_thread_settings() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ICDL_THREADS", "OMP_WAIT_POLICY"):
        env.pop(key, None)
    return env


def run_once(name: str, threads: int | None, scratch: Path) -> float:
    argv = [sys.executable, "-m", "icdl", *COMMANDS[name]]
    if name.startswith("train"):
        out = scratch / f"run-{time.monotonic_ns()}"
        argv += ["--out", str(out)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env_without_thread_settings(), capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode not in VERDICT_EXITS:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    if name.startswith("train"):
        shutil.rmtree(out, ignore_errors=True)
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--competitors", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--commands", default=",".join(COMMANDS))
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    choices: list[int | None] = [None, *range(1, cores + 1)]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.competitors)]
    results: dict[str, Any] = {}
    try:
        time.sleep(2.0)  # let the competitors show in the instantaneous run queue
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.commands.split(","):
                times: dict[str, list[float]] = {str(c or "default"): [] for c in choices}
                for _ in range(args.repeats):
                    for c in choices:
                        times[str(c or "default")].append(run_once(name, c, Path(tmp)))
                medians = {k: statistics.median(v) for k, v in times.items()}
                best = min(v for k, v in medians.items() if k != "default")
                results[name] = {
                    "median_seconds": medians,
                    "all_seconds": times,
                    "default_over_best": medians["default"] / best,
                }
                line = ", ".join(f"{k} {v:.2f} s" for k, v in medians.items())
                print(f"{name}: {line}; default/best {medians['default'] / best:.2f}", flush=True)
    finally:
        for proc in busy:
            proc.kill()
    record = {
        "command": "python benchmarks/bench_threads.py " + " ".join(sys.argv[1:]),
        "cores": cores,
        "competitors": args.competitors,
        "repeats": args.repeats,
        "loadavg_after": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "results": results,
    }
    if args.out is not None:
        atomic_write_json(args.out, record)


if __name__ == "__main__":
    main()
