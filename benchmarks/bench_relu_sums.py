"""Term counts, coefficient mass and measured sup errors of the sum-of-ReLU fits (docs/relu_sums.md).

Run: OMP_NUM_THREADS=1 python benchmarks/bench_relu_sums.py   (prints markdown tables; ~1 min on 1 core)
``--out docs/results/relu_sums.json`` also writes the scalar rows and the command as JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from icdl.errors import InputError
from icdl.relu_sums import loss_derivative_sum, relu_sum_for

FUNCTIONS = ["sigmoid", "tanh", "softplus", "sigmoid'", "tanh'", "softplus'", "relu", "relu'", "identity"]
EPSILONS = [1e-3, 1e-4, 1e-6]
RADIUS = 10.0


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", help="also write the scalar rows and the command to this JSON file")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    print(f"Scalar sums on [-{RADIUS:g}, {RADIUS:g}]\n")
    print("| function | eps | terms H | C = sum abs(c) | max abs(a) | measured sup error | seconds |")
    print("|---|---|---|---|---|---|---|")
    for name in FUNCTIONS:
        for eps in EPSILONS:
            t0 = time.perf_counter()
            s = relu_sum_for(name, eps=eps, radius=RADIUS)
            dt = time.perf_counter() - t0
            rows.append({"function": name, "eps": eps, "radius": RADIUS, "terms": s.num_terms,
                         "coef_mass": s.coef_mass, "max_abs_a": s.max_abs_a, "sup_error": s.sup_error,
                         "exact": bool(s.exact), "seconds": dt})  # fmt: skip
            print(
                f"| {name} | {eps:g} | {s.num_terms} | {s.coef_mass:.4g} | {s.max_abs_a:.3g} | "
                f"{s.sup_error:.3g} | {dt:.2f} |"
            )
            if s.exact:
                break
    print("\nTwo-argument sums u(t, y) on [-R, R]^2\n")
    print("| loss | R | eps | terms H | C | max abs(a) (l1) | measured sup error | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for loss, radius, eps in [
        ("squared", 10.0, 1e-3),
        ("huber", 10.0, 1e-3),
        ("logistic", 1.0, 1e-2),
        ("logistic", 1.0, 1e-3),
        ("logistic", 2.0, 1e-2),
        ("logistic", 3.0, 1e-2),
        ("logistic", 10.0, 1e-3),
    ]:
        t0 = time.perf_counter()
        try:
            u = loss_derivative_sum(loss, eps=eps, radius=radius)
        except InputError as exc:
            print(f"| {loss} | {radius:g} | {eps:g} | error: {exc} | | | | {time.perf_counter() - t0:.2f} |")
            continue
        dt = time.perf_counter() - t0
        print(
            f"| {loss} | {radius:g} | {eps:g} | {u.num_terms} | {u.coef_mass:.4g} | {u.max_abs_a:.3g} | "
            f"{u.sup_error:.3g} | {dt:.2f} |"
        )
    if args.out:
        from icdl.io import atomic_write_json, portable_command

        command = "python benchmarks/bench_relu_sums.py " + portable_command(sys.argv[1:])
        atomic_write_json(args.out, {"command": command, "rows": rows})


if __name__ == "__main__":
    main()
