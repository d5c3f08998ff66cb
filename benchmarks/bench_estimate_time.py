"""The construct time model against measured runs: ``icdl construct``'s estimate next to its wall clock.

Runs ``icdl construct --variant V ... --json --yes --threads 1`` for a fixed set of cases, one at a time, and
records the estimate's seconds (``icdl.construct.estimate.construction_estimate``, the number the command's
guard compares with its limit), the run's wall clock and CPU seconds (user + system of the child), and the
load average before each run: a loaded machine makes the wall clock longer than the estimate claims to
predict (a quiet machine, one thread). ``measured / estimate`` is the number to read.

    python benchmarks/bench_estimate_time.py --out docs/results/construct_time_model.json
    python benchmarks/bench_estimate_time.py --variant softmax        # one variant's cases only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

from icdl.construct import GDConfig
from icdl.construct.estimate import construction_estimate
from icdl.io import atomic_write_json
from icdl.nets import NetSpec

# (variant, depth N, width K, examples n, steps L): the issue-34 case (softmax N=6, K=8, n=256, L=30) and
# smaller ones that move N, n and L one at a time, so a miss can be traced to the term that grows.
CASES: list[tuple[str, int, int, int, int]] = [
    ("softmax", 3, 8, 64, 10),
    ("softmax", 6, 8, 64, 10),
    ("softmax", 3, 8, 256, 10),
    ("softmax", 3, 8, 64, 30),
    ("softmax", 6, 8, 256, 30),
    ("paper", 6, 8, 256, 30),
]
# Held out of the fit of the softmax time model (icdl.construct.variants.softmax): another width, depth,
# length and step count.
HELD_OUT: list[tuple[str, int, int, int, int]] = [
    ("softmax", 2, 16, 64, 10),
    ("softmax", 4, 8, 128, 20),
    ("softmax", 2, 8, 32, 40),
]


def estimate_seconds(variant: str, depth: int, width: int, examples: int, steps: int) -> float:
    """The estimate the CLI's guard sees for the default options (in-dim 4, out-dim 1, ReLU, squared)."""
    spec = NetSpec(depth, width, 4, 1)
    cfg = GDConfig.create(spec, steps=steps, n=examples, variant=variant)
    radius = max(cfg.radius, cfg.weight_range or 0.0)
    est = construction_estimate(
        spec, steps=steps, examples=examples, eps=cfg.eps, radius=radius, variant=variant
    )
    return est.seconds


def run_case(variant: str, depth: int, width: int, examples: int, steps: int) -> dict[str, Any]:
    argv = [
        sys.executable, "-m", "icdl", "construct", "--variant", variant, "-N", str(depth), "-K", str(width),
        "-n", str(examples), "-L", str(steps), "--json", "--yes", "--threads", "1",
    ]  # fmt: skip
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # a FAIL / INCONCLUSIVE verdict exits 5 / 6 with its JSON: the time counts the same
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode not in (0, 5, 6):
        raise SystemExit(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    est = estimate_seconds(variant, depth, width, examples, steps)
    verdict = json.loads(p.stdout).get("verdict")
    return {
        "command": "icdl " + " ".join(argv[3:]),
        "variant": variant, "N": depth, "K": width, "n": examples, "L": steps,
        "estimate_s": round(est, 2), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "wall_over_estimate": round(wall / est, 3), "cpu_over_estimate": round(cpu / est, 3),
        "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2), "verdict": verdict,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the JSON here (atomically)")
    p.add_argument("--variant", help="only this variant's cases")
    args = p.parse_args()
    rows = []
    for case in CASES + HELD_OUT:
        if args.variant and case[0] != args.variant:
            continue
        row = run_case(*case)
        row["held_out"] = case in HELD_OUT
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {
        "command": "python benchmarks/bench_estimate_time.py"
        + (f" --variant {args.variant}" if args.variant else ""),
        "note": "estimate_s: construction_estimate's seconds (what icdl construct's guard compares with its "
        "limit); wall_s / cpu_s: the child's wall clock and user+system CPU, one thread; load_before: the "
        "1-minute load average",
        "cores": os.cpu_count(),
        "rows": rows,
        "max_wall_over_estimate": max(r["wall_over_estimate"] for r in rows) if rows else None,
        "softmax_wall_over_estimate": {
            f: [r["wall_over_estimate"] for r in rows if r["variant"] == "softmax" and r["held_out"] == h]
            for f, h in (("fitted", False), ("held_out", True))
        },
    }
    if args.out:
        atomic_write_json(args.out, doc)


if __name__ == "__main__":
    main()
