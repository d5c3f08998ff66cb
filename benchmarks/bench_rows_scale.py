"""Exact GD at TinT's scale: ``icdl construct --variant rows`` (compile + verify one prompt) at 1M-100M
network parameters, one thread, with its peak memory and the estimate's prediction.

    OMP_NUM_THREADS=1 python benchmarks/bench_rows_scale.py --json docs/results/scale_rows_10m.json \
        -- -N 2 -K 3200 --in-dim 3200 --out-dim 1 -n 64 -L 1

Everything after ``--`` goes to ``icdl construct --variant rows ... --yes --json --threads 1``. The run is a
fresh subprocess; its peak resident memory is the child's ``ru_maxrss`` (``os.wait4``: VmHWM of that process
alone, torch included). The JSON holds the exact command, the report (``icdl construct --json``), the peak,
the estimate ([`construction_estimate`][icdl.construct.estimate.construction_estimate]) and its ratio to the
peak, the wall seconds, and the 1-minute load average before and after: other jobs share this 2-core VM, so
the times are upper bounds of a quiet machine's. The compiled model's parameters are set against the
network's (``dense / P``: every weight matrix of the transformer stored densely; ``stored / P``: the
coefficients it actually keeps), the comparison TinT (Panigrahi et al., ICML 2024) makes: < 2B parameters
to simulate one approximate step of a 125M-parameter model, ~16x.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any

from icdl.io import atomic_write_json

# TinT's ratio: < 2B transformer parameters for one approximate step of a 125M-parameter network
TINT_RATIO = 2e9 / 125e6


def _arg(args: list[str], flag: str, long: str, default: str) -> str:
    for i, a in enumerate(args):
        if a in (flag, long) and i + 1 < len(args):
            return args[i + 1]
    return default


def sizes(spec: Any, n: int, L: int, itemsize: int) -> dict[str, Any]:
    """Tokens T, width D, one T x D state's bytes in the run's dtype, and the estimate in float64 (what
    exactness to 1e-16 would need)."""
    from icdl.construct.estimate import construction_estimate
    from icdl.construct.variants.rows import rows_sizes

    lay = rows_sizes(spec, n)
    f64 = construction_estimate(spec, steps=L, examples=n, itemsize=8, variant="rows")
    return {
        "tokens": lay.T,
        "embedding_dim": lay.D,
        "state_bytes": lay.T * lay.D * itemsize,
        "estimate_float64_bytes": f64.bytes,
        "relu_window_pre_activations": n * spec.num_units,
    }


def run(construct_args: list[str]) -> dict[str, Any]:
    """One ``icdl construct --variant rows`` run in a fresh subprocess: report, peak, estimate, loads."""
    from icdl.construct.estimate import construction_estimate
    from icdl.nets import NetSpec

    cmd = ["icdl", "construct", "--variant", "rows", *construct_args, "--yes", "--json", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        proc = subprocess.Popen([sys.executable, "-m", "icdl", *cmd[1:]], stdout=fout, stderr=ferr, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak (ru_maxrss, KiB)
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        fout.seek(0), ferr.seek(0)
        out, err = fout.read(), ferr.read()
    wall = time.perf_counter() - t0
    peak = usage.ru_maxrss * 1024
    if code not in (0, 4, 5, 6):
        raise SystemExit(f"icdl construct failed ({code}): {err.decode()[-2000:]}")
    report = json.loads(out)
    N = int(_arg(construct_args, "-N", "--depth", "3"))
    K = int(_arg(construct_args, "-K", "--width", "8"))
    dx = int(_arg(construct_args, "--in-dim", "--in-dim", "4"))
    dy = int(_arg(construct_args, "--out-dim", "--out-dim", "1"))
    n = int(_arg(construct_args, "-n", "--examples", "32"))
    L = int(_arg(construct_args, "-L", "--steps", "5"))
    itemsize = 4 if _arg(construct_args, "--dtype", "--dtype", "float64") == "float32" else 8
    spec = NetSpec(N, K, dx, dy)
    est = construction_estimate(spec, steps=L, examples=n, itemsize=itemsize, variant="rows")
    P = spec.num_params
    params = report["parameters"]
    return {
        "command": shlex.join(cmd),
        **sizes(spec, n, L, itemsize),
        "network_parameters": P,
        "transformer_parameters_dense": params["dense"],
        "transformer_parameters_stored": params["stored"],
        "dense_over_network": params["dense"] / P,
        "stored_over_network": params["stored"] / P,
        "tint_ratio": TINT_RATIO,
        "peak_rss_bytes": peak,
        "peak_rss_gb": peak / 1e9,
        "estimate_bytes": est.bytes,
        "estimate_over_peak": est.bytes / peak,
        "estimate_seconds": est.seconds,
        "wall_seconds": wall,
        # CPU seconds of the child (user + system): what the load of other jobs does not inflate much
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "verify_over_forward": report["seconds_verify"] / report["seconds_forward"],
        "load_average_1min_before": load_before,
        "load_average_1min_after": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "report": report,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="write the result here")
    ap.add_argument("construct_args", nargs=argparse.REMAINDER, help="after --: icdl construct options")
    a = ap.parse_args()
    args = [x for x in a.construct_args if x != "--"]
    res = run(args)
    atomic_write_json(a.json, res)
    r = res["report"]
    print(
        f"{r['verdict']}: P={res['network_parameters']:,} forward {r['seconds_forward']:.1f} s, verify "
        f"{r['seconds_verify']:.1f} s ({res['verify_over_forward']:.2f}x), wall {res['wall_seconds']:.0f} s, "
        f"peak {res['peak_rss_gb']:.2f} GB (estimate {res['estimate_over_peak']:.2f}x), "
        f"w error {r['max_abs_err_weights']:.1e}"
    )


if __name__ == "__main__":
    main()
