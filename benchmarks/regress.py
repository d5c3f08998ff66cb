"""The benchmark regression suite (``make bench``): a fixed small set of hot paths, each timed as a ratio to
an in-process reference, compared with the committed baseline (``docs/results/bench_baseline.json``).

A ratio, not a time: a machine twice as fast (or twice as busy) changes the case and its reference alike,
so the baseline written on one machine still says something on another. Each case alternates its work
with its reference (``--rounds`` rounds of enough calls to last ``--min-seconds``) and reports
``ratio = min(work) / min(reference)`` (the least disturbed call of each). The cases (docs/benchmarks.md):

* ``forward/<variant>`` — the steady-state forward of ``compile_gd_transformer(...)(H)`` under
  ``torch.no_grad()`` for every built-in variant at the reference size (N=3, K=16, d_x=8, d_y=1, n=64,
  L=10, float64; softmax at N=2, K=8, d_x=4, n=16, L=3, since one of its forwards at the reference size
  takes about 15 s); reference: the lean float64 GD loop on the same network (``bench_rows.lean_gd``).
* ``verify/rows-default`` — ``icdl construct --variant rows -N 6 -K 64 --in-dim 16 --out-dim 1 -n 256
  -L 50 --json`` in process (compile, run, stream-verify, report); reference: the lean GD loop at that size.
* ``train-step/relu``, ``train-step/softmax`` — one training step (forward, MSE, backward, clip, AdamW) of
  the ``cpu-small`` model on one batch; reference: the same step of Garg et al.'s GPT-2 layout
  (``transformers``' GPT-2, SDPA) where installed, else the lean GD loop (the JSON names the reference,
  and a comparison skips a case whose reference differs from the baseline's).
* ``eval/panel`` — the untuned prefix baselines (averaging, least squares, ridge, 3-NN) on 256 prompts of
  ``cpu-centred`` at 1.5x the training length; reference: the lean GD loop at the reference size.

Usage::

    python benchmarks/regress.py                                # run, compare, exit 1 on a regression
    python benchmarks/regress.py --cases forward/rows,eval/panel  # a subset
    python benchmarks/regress.py --plant forward/rows=0.3         # a planted 30% slowdown (must flag)
    python benchmarks/regress.py --update-baseline                # refresh the committed baseline

A regression is a ratio more than ``--threshold`` (default 15%) above the baseline's. ``--plant
CASE=FRACTION`` adds a busy wait of ``FRACTION`` times the case's own calibrated time to every timed call of
that case (a real slowdown of the measured work, for checking that the suite catches one).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: the committed baseline the suite compares with (docs/benchmarks.md says how to refresh it)
BASELINE = Path(__file__).resolve().parents[1] / "docs" / "results" / "bench_baseline.json"
#: a ratio more than this fraction above the baseline's is a regression
THRESHOLD = 0.15
#: the reference size of the README and issue 31: (N, K, d_x, d_y, n, L)
REFERENCE_SIZE = (3, 16, 8, 1, 64, 10)
ROWS_DEFAULT = (6, 64, 16, 1, 256, 50)
#: the softmax construction at the reference size takes ~15 s a forward on one core: a smaller size
SOFTMAX_SIZE = (2, 8, 4, 1, 16, 3)
#: each variant's size
VARIANTS = {v: REFERENCE_SIZE for v in ("paper", "compact", "no-ewml", "rows")} | {"softmax": SOFTMAX_SIZE}

Work = Callable[[], object]


@dataclass(frozen=True)
class Case:
    """One benchmark case: ``setup()`` returns ``(work, reference, reference_name)``, each a callable
    whose time is measured."""

    name: str
    setup: Callable[[], tuple[Work, Work, str]]


# ---------------------------------------------------------------------------------------------- references


def lean_gd_reference(size: tuple[int, int, int, int, int, int]) -> Work:
    """The lean float64 GD loop (matmuls only) on a random bias-free ReLU network of ``size``."""
    import torch
    from bench_rows import lean_gd

    N, K, dx, dy, n, L = size
    g = torch.Generator().manual_seed(0)
    dims = [dx] + [K] * (N - 1) + [dy]
    Vs = [
        torch.randn(dims[j + 1], dims[j], generator=g, dtype=torch.float64) / dims[j] ** 0.5 for j in range(N)
    ]
    x = torch.randn(n, dx, generator=g, dtype=torch.float64)
    y = torch.randn(n, dy, generator=g, dtype=torch.float64)
    return lambda: lean_gd(Vs, x, y, 0.1, L)


# --------------------------------------------------------------------------------------------------- cases


def forward_case(variant: str, size: tuple[int, int, int, int, int, int]) -> Case:
    def setup() -> tuple[Work, Work, str]:
        import torch

        from icdl.construct import compile_gd_transformer, sample_task
        from icdl.nets import NetSpec

        N, K, dx, dy, n, L = size
        spec = NetSpec(N, K, dx, dy)
        x, y, xq, w0, _ = sample_task(spec, n, seed=0)
        model = compile_gd_transformer(spec, lr=0.1, steps=L, n=n, variant=variant)
        H = model.build_prompt(x, y, xq, w0)

        def work() -> object:
            with torch.no_grad():
                return model(H)

        return work, lean_gd_reference(size), "lean-gd"

    return Case(f"forward/{variant}", setup)


def verify_rows_case() -> Case:
    def setup() -> tuple[Work, Work, str]:
        from icdl.cli import main

        N, K, dx, dy, n, L = ROWS_DEFAULT
        argv = ["construct", "--variant", "rows", "-N", str(N), "-K", str(K), "--in-dim", str(dx)]
        argv += ["--out-dim", str(dy), "-n", str(n), "-L", str(L), "--json"]

        def work() -> object:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                main(argv)
            return None

        return work, lean_gd_reference(ROWS_DEFAULT), "lean-gd"

    return Case("verify/rows-default", setup)


def train_step_case(attention: str) -> Case:
    def setup() -> tuple[Work, Work, str]:
        import torch
        import torch.nn.functional as F

        from icdl.config import load_config
        from icdl.icl.models import build_model
        from icdl.icl.tasks import sample_batch

        torch.manual_seed(0)
        cfg = load_config("cpu-small", [f"model.attention={attention}"])
        batch = sample_batch(cfg.task, cfg.train.batch_size, seed=0)
        d_y = batch.ys.shape[-1]
        model = build_model(cfg.model, cfg.task.dim, d_y)

        def step(net: torch.nn.Module, opt: torch.optim.Optimizer) -> Work:
            def one() -> object:
                loss = F.mse_loss(net(batch.xs, batch.ys), batch.ys)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
                return None

            return one

        work = step(model, torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0))
        try:
            from bench_train import GargGPT2

            m = cfg.model
            ref = GargGPT2(cfg.task.dim, m.d_model, m.layers, m.heads, m.d_mlp, 2 * m.max_points, "sdpa")
            reference = step(ref, torch.optim.AdamW(ref.parameters(), lr=1e-4, weight_decay=0.0))
            return work, reference, "hf-gpt2-sdpa"
        except ImportError:
            return work, lean_gd_reference(REFERENCE_SIZE), "lean-gd"

    return Case(f"train-step/{attention}", setup)


def eval_panel_case() -> Case:
    def setup() -> tuple[Work, Work, str]:
        import torch

        from icdl.config import load_config
        from icdl.icl.baselines.simple import AveragingBaseline, KNNBaseline, LeastSquaresBaseline
        from icdl.icl.tasks import sample_batch

        cfg = load_config("cpu-centred")
        points = cfg.task.examples * 3 // 2 + 1
        pb = sample_batch(cfg.task, 256, seed=1, points=points)
        xs, ys = pb.xs.double(), pb.ys.double()
        panel = [AveragingBaseline(), LeastSquaresBaseline(), LeastSquaresBaseline(ridge=1.0), KNNBaseline()]

        def work() -> object:
            with torch.no_grad():
                return [bl(xs, ys) for bl in panel]

        return work, lean_gd_reference(REFERENCE_SIZE), "lean-gd"

    return Case("eval/panel", setup)


CASES: dict[str, Case] = {
    c.name: c
    for c in [
        *(forward_case(v, size) for v, size in VARIANTS.items()),
        verify_rows_case(),
        train_step_case("relu"),
        train_step_case("softmax"),
        eval_panel_case(),
    ]
}


# ------------------------------------------------------------------------------------------------ timing


#: the suite's clock (a test replaces it with a deterministic one)
CLOCK: Callable[[], float] = time.perf_counter


def spin(seconds: float) -> None:
    """Busy-wait ``seconds`` (the planted slowdown: CPU work, not a sleep)."""
    end = CLOCK() + seconds
    while CLOCK() < end:
        pass


def planted(work: Work, fraction: float, calibrated: float) -> Work:
    """``work`` followed by a busy wait of ``fraction * calibrated`` seconds."""
    if fraction <= 0:
        return work

    def slow() -> object:
        out = work()
        spin(fraction * calibrated)
        return out

    return slow


def time_once(fn: Work, repeats: int) -> float:
    """Least seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return min(times)


def repeats_for(fn: Work, min_seconds: float) -> tuple[int, float]:
    """How many calls of ``fn`` last about ``min_seconds`` (at least 1), and one call's time (after a
    warm-up call)."""
    fn()
    t = time_once(fn, 1)
    return max(1, round(min_seconds / max(t, 1e-9))), t


def measure(case: Case, rounds: int, min_seconds: float, plant: float = 0.0) -> dict[str, Any]:
    """Time ``case`` against its reference, alternating them for ``rounds`` rounds."""
    work, reference, ref_name = case.setup()
    n_work, t_work = repeats_for(work, min_seconds)
    work = planted(work, plant, t_work)
    n_ref, _ = repeats_for(reference, min_seconds)
    w, r = [], []
    for _ in range(rounds):
        r.append(time_once(reference, n_ref))
        w.append(time_once(work, n_work))
    # the least disturbed round of each: on a shared or virtual machine the noise only ever adds time, and
    # medians moved by +-30% between runs here where the minima moved by a few percent
    seconds, ref_seconds = min(w), min(r)
    return {
        "seconds": seconds,
        "reference": ref_name,
        "reference_seconds": ref_seconds,
        "ratio": seconds / ref_seconds,
        "spread": (max(w) / min(w), max(r) / min(r)),
        "repeats": [n_work, n_ref],
        "planted": plant,
    }


# -------------------------------------------------------------------------------------------- comparison


def compare(now: dict[str, Any], base: dict[str, Any], threshold: float = THRESHOLD) -> list[dict[str, Any]]:
    """One row per case in ``now``: its ratio against the baseline's (``change = now / base - 1``) and
    whether that is a regression (``change > threshold``). A case the baseline lacks, or timed against
    another reference, is ``"not compared"``."""
    rows = []
    for name, cur in now.items():
        old = base.get(name)
        if old is None or old.get("reference") != cur["reference"]:
            status, change = "not compared", None
        else:
            change = cur["ratio"] / old["ratio"] - 1.0
            status = "REGRESSION" if change > threshold else ("faster" if change < -threshold else "ok")
        rows.append(
            {
                "case": name,
                "ratio": cur["ratio"],
                "base": None if old is None else old["ratio"],
                "change": change,
                "status": status,
            }
        )
    return rows


def format_rows(rows: list[dict[str, Any]], now: dict[str, Any]) -> str:
    lines = [
        f"{'case':24} {'seconds':>10} {'reference':>14} {'ratio':>8} {'baseline':>9} {'change':>8}  status"
    ]
    for row in rows:
        cur = now[row["case"]]
        base = "-" if row["base"] is None else f"{row['base']:.3g}"
        change = "-" if row["change"] is None else f"{100 * row['change']:+.0f}%"
        lines.append(
            f"{row['case']:24} {cur['seconds']:>10.4g} {cur['reference']:>14} {row['ratio']:>8.3g} "
            f"{base:>9} {change:>8}  {row['status']}"
        )
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "machine": platform.machine(),
    }


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` (unchanged when None) for the block."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads or old)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def parse_plant(values: list[str]) -> dict[str, float]:
    """``CASE=FRACTION`` options as a mapping; ValueError names the bad one."""
    out = {}
    for value in values:
        name, _, frac = value.partition("=")
        try:
            fraction = float(frac)
        except ValueError:
            fraction = -1.0
        if name not in CASES or not fraction >= 0:
            raise ValueError(
                f"--plant {value!r}: want CASE=FRACTION, FRACTION >= 0, CASE one of {', '.join(CASES)}"
            )
        out[name] = fraction
    return out


def recorded_args(argv: list[str]) -> list[str]:
    """``argv`` without ``--out``/``--baseline`` and their paths (a committed JSON names no local path)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--out", "--baseline"):
            skip = True
        elif not a.startswith(("--out=", "--baseline=")):
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated case names (default: all)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--min-seconds", type=float, default=0.3, help="each timing lasts at least this long")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--baseline", type=Path, default=BASELINE)
    p.add_argument("--out", type=Path, default=Path("bench-latest.json"), help="this run's JSON")
    p.add_argument("--threshold", type=float, default=THRESHOLD)
    p.add_argument("--plant", action="append", default=[], metavar="CASE=FRACTION")
    p.add_argument("--update-baseline", action="store_true", help="write this run as the baseline")
    p.add_argument("--no-fail", action="store_true", help="exit 0 even on a regression")
    args = p.parse_args(argv)

    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; cases: {', '.join(CASES)}")
    try:
        plants = parse_plant(args.plant)
    except ValueError as exc:
        p.error(str(exc))

    from icdl.io import atomic_write_json

    now: dict[str, Any] = {}
    with torch_threads(args.threads):
        for name in names:
            now[name] = measure(CASES[name], args.rounds, args.min_seconds, plants.get(name, 0.0))
            print(f"  {name}: ratio {now[name]['ratio']:.3g}", file=sys.stderr, flush=True)
        info = machine()
    record = {
        "command": "python benchmarks/regress.py " + " ".join(recorded_args(argv or sys.argv[1:])),
        "machine": info,
        "threshold": args.threshold,
        "cases": now,
    }
    base = json.loads(args.baseline.read_text())["cases"] if args.baseline.exists() else {}
    rows = compare(now, base, args.threshold)
    record["comparison"] = rows
    atomic_write_json(args.out, record)
    if args.update_baseline:
        atomic_write_json(args.baseline, {k: v for k, v in record.items() if k != "comparison"})
    print(format_rows(rows, now))
    bad = [r["case"] for r in rows if r["status"] == "REGRESSION"]
    if bad:
        print(f"regressions > {100 * args.threshold:.0f}%: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad and not args.no_fail and not args.update_baseline else 0


if __name__ == "__main__":
    sys.exit(main())
