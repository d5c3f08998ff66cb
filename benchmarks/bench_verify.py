"""Benchmark the streaming verifier: ``icdl construct`` (compile, forward, verify on one prompt) as a user
runs it, at the sizes of issue 18 item 5.

    OMP_NUM_THREADS=2 python benchmarks/bench_verify.py --json docs/results/verify_scale.json

Per case, in a fresh subprocess: wall time and peak RSS of the whole command (``os.wait4``'s rusage of that
child: torch itself included), the command's own times (compile, the verification, and the forward pass
inside it with the sublayer check's time left out: the command runs the model once), its verdict, and the
memory/time estimate that decides whether the command is refused
([`icdl.construct.estimate.construction_estimate`][icdl.construct.estimate.construction_estimate]) next to the
measurement. A second subprocess times the forward pass of a 2-step model of the same size against the lean
GD loop of ``bench_rows.py`` and reports both FLOP rates (the forward's executed multiply-adds,
``bench_rows.performed_flops``; the GD loop's ``6 n P`` per step: forward, weight gradients, deltas), so
the time ratio of the two can be read against their FLOP ratio. The machine may be shared: the load
(``os.getloadavg``) is recorded before and after each case.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from icdl.io import atomic_write_json

# (name, variant, N, K, d_x, d_y, n, L, --yes)
CASES: list[tuple[str, str, int, int, int, int, int, int, bool]] = [
    ("rows-default", "rows", 6, 64, 16, 1, 256, 50, False),
    ("paper-default", "paper", 6, 64, 16, 1, 256, 50, True),
    ("rows-large", "rows", 8, 256, 16, 1, 1024, 100, True),
]


def command(variant: str, N: int, K: int, dx: int, dy: int, n: int, L: int, yes: bool) -> list[str]:
    """The ``icdl construct`` command line of one case."""
    args = ["construct", "--variant", variant, "-N", str(N), "-K", str(K), "--in-dim", str(dx)]
    args += ["--out-dim", str(dy), "-n", str(n), "-L", str(L), "--json"]
    return args + (["--yes"] if yes else [])


def run_construct(args: list[str], threads: int) -> dict[str, Any]:
    """Run ``python -m icdl ARGS`` in a fresh process: wall seconds, peak RSS (MiB), exit code, its JSON."""
    import tempfile

    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "icdl", *args], stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, errs = out.read().decode(), err.read().decode()
    res: dict[str, Any] = {
        "exit_code": os.waitstatus_to_exitcode(status),
        "seconds_wall": wall,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        # CPU seconds (user + system): on a loaded machine a better measure of the work than wall time
        "seconds_cpu": usage.ru_utime + usage.ru_stime,
    }
    try:
        res["json"] = json.loads(text)
    except json.JSONDecodeError:
        res["stderr"] = errs[-2000:]
    return res


def rates(variant: str, N: int, K: int, dx: int, dy: int, n: int, repeats: int = 2) -> dict[str, Any]:
    """Forward pass of a 2-step model vs the lean GD loop (2 steps): seconds and GFLOP/s of each."""
    import torch
    from bench_rows import lean_gd, performed_flops

    from icdl.construct import compile_gd_transformer, sample_task
    from icdl.nets import NetSpec, unflatten

    spec = NetSpec(N, K, dx, dy)
    x, y, xq, w0, _ = sample_task(spec, n, seed=0)
    steps = 2
    model = compile_gd_transformer(spec, lr=0.1, steps=steps, n=n, variant=variant)
    H = model.build_prompt(x, y, xq, w0)
    Vs = unflatten(spec, w0)
    fw, gd = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model(H)
        fw.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        lean_gd(Vs, x, y, 0.1, steps)
        gd.append(time.perf_counter() - t0)
    f_fw, f_gd = performed_flops(model), 6 * n * spec.num_params * steps
    t_fw, t_gd = min(fw), min(gd)
    return {
        "steps": steps,
        "seconds_forward": t_fw,
        "seconds_lean_gd": t_gd,
        "time_ratio": t_fw / t_gd,
        "flops_forward": f_fw,
        "flops_lean_gd": f_gd,
        "flop_ratio": f_fw / f_gd,
        "gflops_per_s_forward": f_fw / t_fw / 1e9,
        "gflops_per_s_lean_gd": f_gd / t_gd / 1e9,
        "threads": torch.get_num_threads(),
    }


def estimate(variant: str, N: int, K: int, dx: int, dy: int, n: int, L: int) -> dict[str, Any]:
    from icdl.construct.estimate import construction_estimate
    from icdl.nets import NetSpec

    e = construction_estimate(NetSpec(N, K, dx, dy), steps=L, examples=n, variant=variant)
    return {"estimate_mib": e.bytes / 2**20, "estimate_seconds": e.seconds, "estimate_detail": e.detail}


def run_case(case: tuple, threads: int) -> dict[str, Any]:
    name, variant, N, K, dx, dy, n, L, yes = case
    args = command(variant, N, K, dx, dy, n, L, yes)
    row: dict[str, Any] = {"case": name, "command": "icdl " + " ".join(args), "variant": variant}
    row.update({"N": N, "K": K, "d_x": dx, "d_y": dy, "n": n, "L": L, "threads": threads})
    row.update(estimate(variant, N, K, dx, dy, n, L))
    row["load_before"] = os.getloadavg()
    run = run_construct(args, threads)
    row["load_after"] = os.getloadavg()
    js = run.pop("json", None)
    row.update(run)
    if js is not None:  # the command's own times; seconds_forward: the verified run's forward, check excluded
        keys = ("verdict", "seconds_compile", "seconds_forward", "seconds_verify", "seconds_reference")
        keys += (
            "lipschitz_f",
            "lipschitz_method",
            "max_abs_err_weights",
            "max_sublayer_err",
            "embedding_dim",
        )
        row.update({k: js.get(k) for k in keys})
    row["estimate_over_measured_rss"] = row["estimate_mib"] / row["peak_rss_mib"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--cases", default=",".join(c[0] for c in CASES), help="comma-separated case names")
    ap.add_argument("--no-rates", action="store_true", help="skip the forward / lean GD FLOP rates")
    ap.add_argument(
        "--repeats", type=int, default=1, help="run each case this many times: the row is the median run's"
    )
    args = ap.parse_args()
    wanted = args.cases.split(",")
    rows = []
    for case in CASES:
        if case[0] not in wanted:
            continue
        runs = [run_case(case, args.threads) for _ in range(max(1, args.repeats))]
        # a shared VM's wall times vary run to run: keep every run's, report the median run
        row = sorted(runs, key=lambda r: r["seconds_wall"])[len(runs) // 2]
        if len(runs) > 1:
            row["seconds_wall_runs"] = [r["seconds_wall"] for r in runs]
            row["seconds_cpu_runs"] = [r["seconds_cpu"] for r in runs]
            row["peak_rss_mib_runs"] = [r["peak_rss_mib"] for r in runs]
        if not args.no_rates:
            import torch

            torch.set_num_threads(args.threads)
            row["rates"] = rates(*case[1:7])
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        atomic_write_json(args.json, {"rows": rows, "uname": os.uname().nodename, "cpus": os.cpu_count()})


if __name__ == "__main__":
    main()
