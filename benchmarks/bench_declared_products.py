"""Measured/declared error of the softmax variant's approximate products on the factors they actually
multiplied (the verifier's ``(b) declared`` check, docs/construction.md "What PASS guarantees").

For each activation, ``--seeds`` prompts of a small network (N = 2, K = 3, d_x = 2, d_y = 1, n = 6, L = 2,
lr 0.2) are compiled with ``--variant softmax --eps 1e-3 --range auto`` and verified; per product kind the
worst measured/declared ratio (``VerifyReport.extra["product_error_ratios"]``) over the prompts is
recorded (keyed by the kind's first word: forward, transpose, derivative, gradient), with the verdicts.
Run with one thread::

    OMP_NUM_THREADS=1 python benchmarks/bench_declared_products.py --out docs/results/declared_products.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.nets import NetSpec

ACTIVATIONS = ("sigmoid", "tanh", "softplus", "relu")


def measure(act: str, seeds: int, eps: float) -> dict[str, Any]:
    """The worst measured/declared ratio per product kind over ``seeds`` prompts, and the verdicts."""
    spec = NetSpec(2, 3, 2, 1, activation=act)
    worst: dict[str, float] = {}
    verdicts: list[str] = []
    for seed in range(seeds):
        x, y, xq, w0, _ = sample_task(spec, 6, seed=seed)
        model = compile_gd_transformer(
            spec, lr=0.2, steps=2, n=6, eps=eps, variant="softmax", radius="auto", prompt=(x, y, xq, w0)
        )
        rep = verify(model, x, y, xq, w0)
        verdicts.append(rep.verdict)
        for kind, r in rep.extra["product_error_ratios"].items():
            short = kind.split()[0]  # "forward v*p" -> "forward"
            worst[short] = max(worst.get(short, 0.0), r)
    return {"activation": act, "verdicts": verdicts, "worst_ratio": worst}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--eps", type=float, default=1e-3)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    rows = [measure(act, a.seeds, a.eps) for act in ACTIVATIONS]
    res = {
        "command": "OMP_NUM_THREADS=1 python benchmarks/bench_declared_products.py "
        f"--seeds {a.seeds} --eps {a.eps:g}",
        "setup": "NetSpec(2, 3, 2, 1), n=6, steps=2, lr=0.2, variant softmax, radius auto, float64",
        "rows": rows,
    }
    text = json.dumps(res, indent=2)
    print(text)
    if a.out is not None:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
