"""The compiled forward on a device (a GPU where there is one) at the scale sizes of docs/construction.md.

For each size: compile on the CPU (float64), move the model and its prompt to ``--device``, run the
forward under ``torch.no_grad()`` ``--repeats`` times after one warm-up (synchronising CUDA around each),
and record the median seconds, the peak device memory (CUDA) and ``max |w_TF - w_GD|`` of the device's
result against the plain GD loop on the CPU (the exactness does not depend on where it ran).

    python benchmarks/bench_device.py --device cuda --out runs/gpu/bench_device.json  # gpu_reproduce.sh
    python benchmarks/bench_device.py --device cpu --sizes toy                         # its dry run

Sizes (variant, N, K, d_x, d_y, n, L): ``toy`` rows 2,4,4,1,8,2; ``reference`` paper 3,16,8,1,64,10 and rows
3,16,8,1,64,10; ``rows-default`` rows 6,64,16,1,256,50; ``rows-large`` rows 8,256,16,1,1024,100;
``rows-1m`` rows 2,1024,1024,1,64,1; ``rows-10m`` rows 2,3200,3200,1,64,1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from icdl.io import atomic_write_json

SIZES: dict[str, list[tuple[str, int, int, int, int, int, int]]] = {
    "toy": [("rows", 2, 4, 4, 1, 8, 2)],
    "reference": [("paper", 3, 16, 8, 1, 64, 10), ("rows", 3, 16, 8, 1, 64, 10)],
    "rows-default": [("rows", 6, 64, 16, 1, 256, 50)],
    "rows-large": [("rows", 8, 256, 16, 1, 1024, 100)],
    "rows-1m": [("rows", 2, 1024, 1024, 1, 64, 1)],
    "rows-10m": [("rows", 2, 3200, 3200, 1, 64, 1)],
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_point(
    point: tuple[str, int, int, int, int, int, int], device: torch.device, repeats: int
) -> dict[str, Any]:
    from icdl.construct import compile_gd_transformer, sample_task
    from icdl.nets import NetSpec, reference_gd

    variant, N, K, dx, dy, n, L = point
    spec = NetSpec(N, K, dx, dy)
    x, y, xq, w0, _ = sample_task(spec, n, seed=0)
    t0 = time.perf_counter()
    model = compile_gd_transformer(spec, lr=0.1, steps=L, n=n, variant=variant)
    compile_s = time.perf_counter() - t0
    H = model.build_prompt(x, y, xq, w0)
    model, Hd = model.to(device), H.to(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    with torch.no_grad():
        out = model(Hd)  # warm-up (and the result checked below)
        sync(device)
        for _ in range(repeats):
            t = time.perf_counter()
            model(Hd)
            sync(device)
            times.append(time.perf_counter() - t)
    w_tf = model.read_weights(out)[0].cpu()
    w_gd = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=L)[-1]
    err = float((w_tf.reshape(-1) - w_gd.reshape(-1)).abs().max())
    return {
        "variant": variant,
        "size": {"N": N, "K": K, "d_x": dx, "d_y": dy, "n": n, "L": L},
        "target_parameters": spec.num_params,
        "device": str(device),
        "compile_s": compile_s,
        "forward_s": statistics.median(times),
        "peak_device_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "max_abs_err_weights": err,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--sizes", nargs="+", default=["reference", "rows-default", "rows-large", "rows-1m", "rows-10m"]
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    unknown = [s for s in args.sizes if s not in SIZES]
    if unknown:
        p.error(f"unknown size(s) {', '.join(unknown)}; sizes: {', '.join(SIZES)}")
    device = torch.device(args.device)
    rows = []
    for name in args.sizes:
        for point in SIZES[name]:
            row = {"name": name, **run_point(point, device, args.repeats)}
            rows.append(row)
            times = f"compile {row['compile_s']:.2f} s, forward {row['forward_s']:.4g} s on {device}"
            err = row["max_abs_err_weights"]
            print(f"{name} {row['variant']}: {times}, max |w_TF - w_GD| {err:.2g}", flush=True)
    if args.out is not None:
        command = "python benchmarks/bench_device.py " + " ".join(sys.argv[1:])
        atomic_write_json(args.out, {"command": command, "torch": torch.__version__, "rows": rows})


if __name__ == "__main__":
    main()
