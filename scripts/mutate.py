"""A small mutation run: plant one realistic single-token bug at a time in the construction, the verifier
and the ReLU-sum fitter (plus the four planted bugs of the trust checks), run the tests that guard that
code, and report which mutants the tests kill.

Run from the repository root (docs/testing.md records the result)::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD/src python scripts/mutate.py [--only NAME ...] [--json out.json]

Each mutant is an exact text replacement in one file (applied to a single occurrence, which must exist);
the file is restored afterwards whatever happens. A mutant is *killed* when the test command fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRUCT_TESTS = [
    "tests/construct/test_construct.py",
    "tests/construct/test_verify.py",
    "tests/construct/test_verify_localise.py",
    "tests/construct/test_variant_compact.py",
    "tests/construct/test_contract.py",
    "tests/construct/test_construct_store.py",
]
SUMS_TESTS = ["tests/test_relu_sums.py", "tests/cli/test_cli_approx.py"]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


C, V, S, B, T = (
    "src/icdl/construct/compile.py",
    "src/icdl/construct/verify.py",
    "src/icdl/relu_sums.py",
    "src/icdl/construct/blocks.py",
    "src/icdl/construct/terms.py",
)
LAY, LYT = "src/icdl/construct/layers.py", "src/icdl/construct/layout.py"
CT, ST = tuple(CONSTRUCT_TESTS), tuple(SUMS_TESTS)

MUTANTS = [
    # -- the four planted bugs of issue 14 and the NaN bug itself (each has a dedicated test) --------
    Mutant(
        "verify-nan-blind",
        V,
        "bad = ~torch.isfinite(got) & torch.isfinite(want)",
        "bad = torch.zeros_like(got, dtype=torch.bool)",
        (
            "tests/construct/test_verify_localise.py::test_a_planted_value_is_named_with_its_sublayer_and_slot",
        ),
        "slot comparison blind to NaN/inf",
    ),
    Mutant(
        "verify-window-counts-query",
        V,
        "ze = z[:n]",
        "ze = z",
        ("tests/construct/test_verify_localise.py::test_query_inside_the_relu_window_is_not_counted",),
        "relu' window counter counts the query",
    ),
    Mutant(
        "sums-skip-midpoints",
        S,
        "float(np.abs(evaluate(mid) - s(mid).numpy()).max()),",
        "0.0,",
        ("tests/test_relu_sums.py::test_a_feature_between_the_probe_points_is_caught",),
        "fitter's sup check skips the points between its grid",
    ),
    Mutant(
        "train-skip-rng-restore",
        "src/icdl/icl/train.py",
        "        _set_rng_state(\n",
        "        (lambda _state: None)(\n",
        ("tests/icl/test_train_resume_dropout.py",),
        "resume does not restore the global RNG",
    ),
    Mutant(
        "readout-sign",
        B,
        "units.add([(t, -ctx.gate), (p, -1.0)], [(y, -1.0)])",
        "units.add([(t, -ctx.gate), (p, -1.0)], [(y, 1.0)])",
        ("tests/construct/test_verify_localise.py::test_readout_of_a_clearly_negative_prediction",),
        "readout's negative half has the wrong sign",
    ),
    # -- construction ---------------------------------------------------------------------------
    Mutant("update-factor", B, "scale = ctx.lr * (n + 1) / (2 * n)", "scale = ctx.lr * n / (2 * n)", CT, ""),
    Mutant("update-sign", B, "v=[(p, w, -sigma * scale)", "v=[(p, w, sigma * scale)", CT, ""),
    Mutant("forward-bias-sign", B, "+ [(one, b)],", "+ [(one, -b)],", CT, ""),
    Mutant(
        "loss-gate-order",
        B,
        "reads = [(one, -C), (t, C)]",
        "reads = [(t, C), (one, -C)]",
        CT,
        "gate accumulated in the other order",
    ),
    Mutant("loss-gate-sign", B, "reads = [(one, -C), (t, C)]", "reads = [(one, C), (t, -C)]", CT, ""),
    Mutant(
        "backward-value-sign",
        B,
        'q=[(i, 1.0) for i in col], k=[(i, 1.0) for i in L.indices("S", j + 1)], v=[(r, dst, 1.0)]',
        'q=[(i, 1.0) for i in col], k=[(i, 1.0) for i in L.indices("S", j + 1)], v=[(r, dst, -1.0)]',
        CT,
        "",
    ),
    Mutant(
        "backward-top-key",
        B,
        'k=[(L.index("ONE"), 1.0)], v=[(r, dst, 1.0)]',
        'k=[(L.index("T"), 1.0)], v=[(r, dst, 1.0)]',
        CT,
        "E_N keys on T instead of ONE",
    ),
    Mutant(
        "cleanup-half", B, "units.add([(i, -1.0)], [(i, 1.0)])", "units.add([(i, -1.0)], [(i, 0.5)])", CT, ""
    ),
    Mutant(
        "box-bias-sign",
        B,
        "units.add([(i, 1.0), (one, -B)], [(i, -1.0)])",
        "units.add([(i, 1.0), (one, B)], [(i, -1.0)])",
        CT,
        "",
    ),
    Mutant(
        "derivative-not-exact",
        B,
        'return ctx.attention(heads, Role("derivative", "Lemma 3"), exact_sums=ctx.exact_step)',
        'return ctx.attention(heads, Role("derivative", "Lemma 3"), exact_sums=False)',
        CT,
        "relu' heads summed over keys first",
    ),
    Mutant(
        "compact-not-exact",
        "src/icdl/construct/compact.py",
        "exact_sums=exact)",
        "exact_sums=False)",
        CT,
        "",
    ),
    Mutant(
        "snap-off", T, "_SNAP_ULPS = 8.0", "_SNAP_ULPS = 0.0", CT, "no snapping of conditioned coefficients"
    ),
    Mutant("condition-off", T, "lam = abs(ci)", "lam = 1.0", CT, "terms not rescaled to |c| = 1"),
    Mutant(
        "prompt-query-t", C, 'H[:, :n, layout.index("T")] = 1.0', 'H[:, :, layout.index("T")] = 1.0', CT, ""
    ),
    Mutant(
        "w-column-major",
        LYT,
        "self.spec.offsets[j - 1] + k * cols + l",
        "self.spec.offsets[j - 1] + l * rows + k",
        CT,
        "",
    ),
    Mutant("attention-norm", LAY, "return acc / T", "return acc / (T + 1)", CT, ""),
    Mutant("mlp-no-relu", LAY, "hid = torch.relu(pre)", "hid = pre", CT, ""),
    Mutant(
        "ewml-sign",
        LAY,
        "return H + _tokens(_scatter(self.dim, self.v_dst.reshape(-1), contrib), B, T)",
        "return H - _tokens(_scatter(self.dim, self.v_dst.reshape(-1), contrib), B, T)",
        CT,
        "",
    ),
    Mutant(
        "fast-path-q", LAY, "Fq = F[..., :1]", "Fq = F[..., -1:]", CT, "query fast path takes the last token"
    ),
    # -- verifier -------------------------------------------------------------------------------
    Mutant(
        "verify-last-divergence",
        V,
        "if self.first is None and failing:",
        "if failing:",
        CT,
        "reports the last divergence",
    ),
    Mutant(
        "verify-tol-loose",
        V,
        "failing = [se for se in errs if not se.rel <= tols.get(se.slot, self.tol)]",
        "failing = [se for se in errs if not se.rel <= 1e3 * tols.get(se.slot, self.tol)]",
        CT,
        "tolerance 1000x too loose",
    ),
    Mutant(
        "verify-no-unchanged-check",
        V,
        "exp = self.cur.clone()",
        "exp = H.clone()",
        CT,
        "slots not named are not checked",
    ),
    Mutant(
        "verify-exact-errors-off",
        V,
        "self.acc[e.quantity] = err if math.isnan(old) else max(old, err)",
        "self.acc[e.quantity] = old",
        CT,
        "per-step errors vs exact Lemma 1 terms never filled",
    ),
    Mutant(
        "verify-grad-err-scale",
        V,
        "else w_new)) / self.model.config.lr",
        "else w_new)) / (2 * self.model.config.lr)",
        CT,
        "gradient error of the applied step",
    ),
    Mutant(
        "verify-ref-stale",
        V,
        "            walk.ref = walk.reference(walk.step_w)",
        "            pass",
        CT,
        "reference never re-evaluated after step 1",
    ),
    Mutant(
        "verify-query-rows",
        V,
        'rows = slice(None) if e.tokens == "all" else slice(-1, None)',
        "rows = slice(None)",
        CT,
        "query-only effects applied to all tokens",
    ),
    Mutant(
        "verify-prediction-layer",
        "src/icdl/construct/contract.py",  # Reference.value lives in the contract
        'return g.p[len(g.p) - 1 if q == "prediction" else _layer(e, 0)]',
        'return g.p[len(g.p) - 2 if q == "prediction" else _layer(e, 0)]',
        CT,
        "",
    ),
    Mutant(
        "verify-gate-margin",
        V,
        "c.gate_margin = min(c.gate_margin, cfg.gate - arg)",
        "c.gate_margin = min(c.gate_margin, cfg.gate + arg)",
        CT,
        "",
    ),
    # -- ReLU sums --------------------------------------------------------------------------------
    Mutant(
        "sums-step-coef",
        S,
        "[(1.0 / delta, 0.0, 1.0), (1.0 / delta, -1.0, -1.0)]",
        "[(1.0 / delta, 0.0, 1.0), (1.0 / delta, -1.0, -0.5)]",
        ST + CT[:1],
        "",
    ),
    Mutant(
        "sums-tube-wide",
        S,
        "build_eps = eps * (1 - 0.011)",
        "build_eps = eps * 1.5",
        ST,
        "fit built in a tube wider than eps",
    ),
    Mutant(
        "sums-2arg-sign",
        S,
        "pre = pre + chunk[i][:, None] * A[:, i]",
        "pre = pre - chunk[i][:, None] * A[:, i]",
        ST,
        "",
    ),
    Mutant(
        "sums-identity",
        S,
        "[(1.0, 0.0, 1.0), (-1.0, 0.0, -1.0)]",
        "[(1.0, 0.0, 1.0), (-1.0, 0.0, 1.0)]",
        ST,
        "",
    ),
    Mutant(
        "sums-huber",
        S,
        "[(1.0, -1.0, d, 2.0), (1.0, -1.0, -d, -2.0), (0.0, 0.0, 1.0, -2.0 * d)]",
        "[(1.0, -1.0, d, 2.0), (1.0, -1.0, -d, -2.0), (0.0, 0.0, 1.0, -1.0 * d)]",
        ST,
        "",
    ),
    Mutant("sums-coef-mass", S, "return float(self.c.abs().sum())", "return float(self.c.sum())", ST, ""),
]


WHY = {
    "update-factor": "update scaled by n/(2n) instead of (n+1)/(2n)",
    "update-sign": "update moves w up the gradient",
    "forward-bias-sign": "forward heads' bias negated",
    "loss-gate-sign": "query gate opens on the examples",
    "backward-value-sign": "E_j (j < N) writes -s(j)",
    "cleanup-half": "scratch cleared to h/2 instead of 0",
    "box-bias-sign": "box clip at -B instead of B",
    "compact-not-exact": "compact's relu' heads summed over keys first",
    "prompt-query-t": "the query gets t = 1",
    "w-column-major": "W addressed column-major",
    "attention-norm": "ReLU attention divides by T + 1",
    "mlp-no-relu": "MLP without its ReLU",
    "ewml-sign": "EWML subtracts its output",
    "verify-prediction-layer": "prediction read from p(N-1)",
    "verify-gate-margin": "gate margin C + |arg| instead of C - |arg|",
    "sums-step-coef": "relu' step's second coefficient halved",
    "sums-2arg-sign": "two-argument sums subtract the second argument",
    "sums-identity": "identity's second term has the wrong sign",
    "sums-huber": "Huber derivative's constant term halved",
    "sums-coef-mass": "coef_mass sums signed coefficients",
}
MUTANTS = [
    m if m.why else Mutant(m.name, m.path, m.old, m.new, m.tests, WHY.get(m.name, "")) for m in MUTANTS
]


def run(m: Mutant, timeout: float) -> tuple[str, float]:
    path = ROOT / m.path
    original = path.read_text()
    if original.count(m.old) < 1:
        return "missing", 0.0
    path.write_text(original.replace(m.old, m.new, 1))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", *m.tests]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        status = "survived" if r.returncode == 0 else "killed"
    except subprocess.TimeoutExpired:
        status = "killed (timeout)"
    finally:
        path.write_text(original)
    return status, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="run only these mutants")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    todo = [m for m in MUTANTS if not args.only or m.name in args.only]
    results = []
    for m in todo:
        status, sec = run(m, args.timeout)
        results.append(
            {"name": m.name, "file": m.path, "status": status, "seconds": round(sec, 1), "why": m.why}
        )
        print(f"{m.name:<28} {status:<10} {sec:6.1f}s  {m.path}", flush=True)
    killed = sum(r["status"].startswith("killed") for r in results)
    valid = sum(r["status"] != "missing" for r in results)
    print(f"killed {killed} / {valid} ({100 * killed / max(1, valid):.0f}%)")
    for r in results:
        if r["status"] in ("survived", "missing"):
            print(f"  {r['status']}: {r['name']} ({r['why'] or r['file']})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
