"""A small mutation run: plant one realistic single-token bug at a time in the construction, the verifier
and the ReLU-sum fitter (plus the four planted bugs of the trust checks, and the sites of issue 21's audit:
integrity, caches, estimates, documented behaviour), run the tests that guard that code, and report which
mutants the tests kill and by which test.

Run from the repository root, on a copy of the checkout (docs/testing.md records the result)::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD/src python scripts/mutate.py [--group G | --only NAME ...] [--json F]
    python scripts/mutate.py --check      # which mutants no longer match their source (exit 1 if any)

Groups: ``project`` (the original list), ``audit21`` (issue 21's sites), ``audit21+repaired`` (those plus
the project mutants whose snippets were updated), ``all``. Each mutant is an exact text replacement in one
file (applied to a single occurrence); the file is restored afterwards whatever happens. A mutant is
*killed* when the test command fails; one whose snippet is no longer in its file is reported STALE and
not counted.
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
    "tests/construct/check/test_verify.py",
    "tests/construct/check/test_verify_localise.py",
    "tests/construct/check/test_verify_streaming.py",
    "tests/construct/variants/test_variant_compact.py",
    "tests/construct/build/test_contract.py",
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
    "src/icdl/construct/check/verify.py",
    "src/icdl/relu_sums.py",
    "src/icdl/construct/build/blocks.py",
    "src/icdl/construct/engine/terms.py",
)
LAY, LYT = "src/icdl/construct/engine/layers.py", "src/icdl/construct/engine/layout.py"
RST, IO = "src/icdl/relu_sum_type.py", "src/icdl/io.py"
# the sublayer check; the prompt
STR, PR = "src/icdl/construct/check/stream.py", "src/icdl/construct/build/prompt.py"
CT, ST = tuple(CONSTRUCT_TESTS), tuple(SUMS_TESTS)

MUTANTS = [
    # -- the four planted bugs of issue 14 and the NaN bug itself (each has a dedicated test) --------
    Mutant(
        "verify-nan-blind",
        STR,
        "bad = ~torch.isfinite(got) & torch.isfinite(want)",
        "bad = torch.zeros_like(got, dtype=torch.bool)",
        (
            "tests/construct/check/test_verify_localise.py::test_a_planted_value_is_named_with_its_sublayer_and_slot",
        ),
        "slot comparison blind to NaN/inf",
    ),
    Mutant(
        "verify-window-counts-query",
        V,
        "ze = z[:n]",
        "ze = z",
        ("tests/construct/check/test_verify_localise.py::test_query_inside_the_relu_window_is_not_counted",),
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
        "src/icdl/icl/training/checkpoint.py",
        "    _set_rng_state(\n",
        "    (lambda _state: None)(\n",
        ("tests/icl/training/test_train_resume_dropout.py",),
        "resume does not restore the global RNG",
    ),
    Mutant(
        "readout-sign",
        B,
        "units.add([(t, -ctx.gate), (p, -1.0)], [(y, -1.0)])",
        "units.add([(t, -ctx.gate), (p, -1.0)], [(y, 1.0)])",
        ("tests/construct/check/test_verify_localise.py::test_readout_of_a_clearly_negative_prediction",),
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
        "src/icdl/construct/variants/compact.py",
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
        "prompt-query-t",
        PR,
        'H[:, a : a + n, layout.index("T")] = 1.0',
        'H[:, a:, layout.index("T")] = 1.0',
        CT,
        "",
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
        "return H + as_tokens(scatter(self.dim, self.v_dst.reshape(-1), contrib), B, T)",
        "return H - as_tokens(scatter(self.dim, self.v_dst.reshape(-1), contrib), B, T)",
        CT,
        "",
    ),
    Mutant(
        "fast-path-q", LAY, "Fq = F[..., :1]", "Fq = F[..., -1:]", CT, "query fast path takes the last token"
    ),
    # -- verifier -------------------------------------------------------------------------------
    Mutant(
        "verify-last-divergence",
        STR,
        "if self.first is None and failing:",
        "if failing:",
        CT,
        "reports the last divergence",
    ),
    Mutant(
        "verify-tol-loose",
        STR,
        "failing = [se for se in errs if not se.rel <= plan.tols.get(se.slot, self.tol)]",
        "failing = [se for se in errs if not se.rel <= 1e3 * plan.tols.get(se.slot, self.tol)]",
        CT,
        "tolerance 1000x too loose",
    ),
    Mutant(
        "verify-no-unchanged-check",
        STR,
        "if not (same and all(torch.equal(S[r, cols], cur[r, cols]) for cols in plan.spans)):",
        "if False:",
        CT,
        "slots not named are not checked",
    ),
    Mutant(
        "verify-exact-errors-off",
        STR,
        "self.acc[e.quantity] = err if math.isnan(old) else max(old, err)",
        "self.acc[e.quantity] = old",
        CT,
        "per-step errors vs exact Lemma 1 terms never filled",
    ),
    Mutant(
        "verify-grad-err-scale",
        STR,
        "else w_new)) / self.model.config.lr",
        "else w_new)) / (2 * self.model.config.lr)",
        CT,
        "gradient error of the applied step",
    ),
    Mutant(
        "verify-ref-stale",
        STR,
        "            self.ref = self.reference(self.step_w)",
        "            pass",
        CT,
        "reference never re-evaluated after step 1",
    ),
    Mutant(
        "verify-query-rows",
        STR,
        '"query": slice(self.T_all - 1, None),',
        '"query": slice(a, None),',
        CT,
        "query-only effects applied to all data tokens",
    ),
    Mutant(
        "verify-prediction-layer",
        "src/icdl/construct/build/contract.py",  # Reference.value lives in the contract
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
        RST,  # ReluSum.__call__ moved to relu_sum_type.py; its no-grad path is the one evaluations take
        "view.addcmul_(flats[i][start:stop, None], A[:, i])",
        "view.addcmul_(flats[i][start:stop, None], A[:, i], value=-1.0)",
        ST,
        "",
    ),
    Mutant(
        "sums-2arg-sign-grad",
        RST,
        "pre = pre + chunk[i][:, None] * A[:, i]",
        "pre = pre - chunk[i][:, None] * A[:, i]",
        ST,
        "two-argument sums subtract the second argument (differentiable path)",
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
    Mutant("sums-coef-mass", RST, "return float(self.c.abs().sum())", "return float(self.c.sum())", ST, ""),
]

# -- issue 21 item 8: sites of the second audit (blind spots it found, and documented behaviour) ---------
STORE_T = "tests/reliability/test_store_consistency.py"
MANIFEST_T = "tests/reliability/test_manifest.py"
AUDIT21 = [
    Mutant(
        "store-hash-no-weights",
        "src/icdl/construct/store.py",
        "h.update(weights)",
        'h.update(b"")',
        ("tests/construct/test_construct_store.py", STORE_T),
        "saved construction's content hash no longer covers weights.safetensors",
    ),
    Mutant(
        "verify-own-w-at-gd",
        V,
        "pred_own = forward_query(model, traj_tf[-1], c.prompt.x_query)",
        "pred_own = forward_query(model, traj_gd[-1], c.prompt.x_query)",
        ("tests/construct/check/test_verify.py",),
        "max_abs_err_prediction_own_w computed at GD's weights, not the transformer's",
    ),
    Mutant(
        "softmax-products-on-radius",
        "src/icdl/construct/variants/softmax.py",
        "bw = weight_range if weight_range is not None else box if box is not None else radius",
        "bw = radius",
        ("tests/construct/engine/test_products.py", "tests/construct/variants/test_variant_softmax.py"),
        "weight products fitted on the radius R instead of the box B",
    ),
    Mutant(
        "cache-mtime-flipped",
        "src/icdl/icl/evaluation/evaluate.py",
        'ck["mtime"] > old.get("mtime", -1)',
        'ck["mtime"] < old.get("mtime", -1)',
        ("tests/icl/evaluation/test_evaluate.py::test_cache_reuse_and_staleness", MANIFEST_T),
        "eval cache stale when the checkpoint is older, not newer",
    ),
    Mutant(
        "cache-digest-flipped",
        "src/icdl/icl/evaluation/cache.py",
        'seal_.get("checkpoint_manifest_sha256") == checkpoint_digest(run_dir)',
        'seal_.get("checkpoint_manifest_sha256") != checkpoint_digest(run_dir)',
        ("tests/icl/evaluation/test_evaluate.py::test_cache_reuse_and_staleness", MANIFEST_T),
        "eval cache trusted only when the checkpoint hash differs",
    ),
    Mutant(
        "train-mem-acts-floats",
        "src/icdl/icl/training/train.py",
        "float(host if cuda else host + 4 * acts)",
        "float(host if cuda else host + acts)",
        ("tests/cli/test_hardening.py", "tests/icl/training/test_train_estimate.py"),
        "CPU activations counted in floats, not bytes (4x low)",
    ),
    Mutant(
        "train-mem-quarter",
        "src/icdl/icl/training/train.py",
        "float(host if cuda else host + 4 * acts)",
        "float(host if cuda else (host + 4 * acts) / 4)",
        ("tests/cli/test_hardening.py", "tests/icl/training/test_train_estimate.py"),
        "CPU training-memory estimate 4x low",
    ),
    Mutant(
        "dense-guard-heads",
        "src/icdl/construct/engine/sublayers.py",
        "return self.num_heads * (2 * self.head_dim * self.dim + self.dim * self.dim)",
        "return 2 * self.head_dim * self.dim + self.dim * self.dim",
        ("tests/inspect/test_head_pattern_variants.py", "tests/inspect/test_inspect.py"),
        "dense_sublayer's size guard ignores the head count",
    ),
    Mutant(
        "mmd-biased-denominator",
        "src/icdl/diffusion/metrics.py",
        "/ (m * (m - 1))",
        "/ (m * m)",
        (
            "tests/diffusion/test_score_task.py::test_sample_distances",
            "tests/diffusion/test_score_metrics.py",
        ),
        "MMD^2 within-sample term divided by m^2 (biased) instead of m(m-1)",
    ),
    Mutant(
        "atomic-write-0600",
        IO,
        "os.chmod(tmp, file_mode())  # mkstemp creates 0600; give the usual mode",
        "pass",
        (
            "tests/reliability/test_atomic_dir.py",
            "tests/construct/test_construct_store.py",
            "tests/test_io.py",
        ),
        "atomic_write leaves mkstemp's 0600",
    ),
    Mutant(
        "file-mode-no-umask",
        IO,
        "return 0o666 & ~umask",
        "return 0o666",
        (
            "tests/reliability/test_atomic_dir.py",
            "tests/construct/test_construct_store.py",
            "tests/test_io.py",
        ),
        "file mode ignores the umask (world-writable files)",
    ),
    Mutant(
        "layout-index-bounds",
        LYT,
        "if not 0 <= k < s.size:",
        "if not 0 <= k <= s.size:",
        ("tests/construct/engine/test_layers.py", "tests/construct/engine/test_layout.py"),
        "Layout.index accepts one past the slot's end",
    ),
    Mutant(
        "expect-tokens-unchecked",
        "src/icdl/construct/build/contract.py",
        'if self.tokens not in ("all", "query", "data", "prefix"):',
        "if False:",
        ("tests/construct/build/test_contract.py",),
        "Expect accepts any token selection",
    ),
    Mutant(
        "read-json-kind-flipped",
        IO,
        'kind = "truncated" if ended else "corrupt"',
        'kind = "corrupt" if ended else "truncated"',
        (
            "tests/construct/test_construct_store.py",
            "tests/reliability/test_check_cli.py",
            "tests/test_io.py",
        ),
        '"truncated" and "corrupt" swapped in JSON read errors',
    ),
]
# Project mutants whose snippets had gone stale (code moved or rewritten), updated for the same bug.
AUDIT21_REPAIRED = (
    "prompt-query-t",
    "verify-query-rows",
    "sums-2arg-sign",
    "sums-coef-mass",
    "train-skip-rng-restore",
    "sums-2arg-sign-grad",  # new: the old snippet of sums-2arg-sign, now only on the autograd path
)


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
PROJECT = [
    m if m.why else Mutant(m.name, m.path, m.old, m.new, m.tests, WHY.get(m.name, "")) for m in MUTANTS
]
MUTANTS = PROJECT + AUDIT21
GROUPS = {
    "all": [m.name for m in MUTANTS],
    "project": [m.name for m in PROJECT],
    "audit21": [m.name for m in AUDIT21],
    "audit21+repaired": [*AUDIT21_REPAIRED, *(m.name for m in AUDIT21)],
}
STALE = "stale (snippet not in file)"


def applies(m: Mutant) -> bool:
    """Whether the mutant's snippet still occurs in its file (a refactoring can make a mutant stale)."""
    path = ROOT / m.path
    return path.is_file() and m.old in path.read_text()


def _first_failure(output: str) -> str:
    """The first ``FAILED``/``ERROR`` test id in pytest's summary (``-ra``), or ``""``."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split()[1]
    return ""


def run(m: Mutant, timeout: float) -> tuple[str, float, str]:
    path = ROOT / m.path
    if not applies(m):
        return STALE, 0.0, ""
    original = path.read_text()
    path.write_text(original.replace(m.old, m.new, 1))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:xdist", "-p", "no:cacheprovider"]
    t0 = time.perf_counter()
    by = ""
    try:
        r = subprocess.run(
            [*cmd, *m.tests], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        status = "survived" if r.returncode == 0 else "killed"
        by = _first_failure(r.stdout) if r.returncode else ""
    except subprocess.TimeoutExpired:
        status = "killed (timeout)"
    finally:
        path.write_text(original)
    return status, time.perf_counter() - t0, by


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="run only these mutants (names)")
    ap.add_argument("--group", choices=sorted(GROUPS), help="run only this group of mutants")
    ap.add_argument("--check", action="store_true", help="only say which mutants still apply (no tests)")
    ap.add_argument("--baseline", action="store_true", help="first run each test set on the real code")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    names = set(GROUPS[args.group]) if args.group else None
    unknown = sorted(set(args.only or ()) - set(GROUPS["all"]))
    if unknown:
        ap.error(f"unknown mutants: {', '.join(unknown)}")
    todo = [
        m for m in MUTANTS if (not args.only or m.name in args.only) and (names is None or m.name in names)
    ]
    if args.baseline:  # a test that fails on the real code would count every mutant it guards as killed
        for tests in dict.fromkeys(m.tests for m in todo):
            status, sec, by = run(Mutant("baseline", todo[0].path, "", "", tests, ""), args.timeout)
            verdict = "pass" if status == "survived" else f"FAIL {by}"
            print(f"baseline {verdict:<40} {sec:6.1f}s  {' '.join(tests)}", flush=True)
            if status != "survived":
                sys.exit(f"tests fail on the unmodified code: {' '.join(tests)}")
    if args.check:
        stale = [m for m in todo if not applies(m)]
        for m in stale:
            print(f"STALE: {m.name} ({m.path}): snippet {m.old!r} not found; update it to the current code")
        print(f"{len(todo) - len(stale)} of {len(todo)} mutants apply")
        sys.exit(1 if stale else 0)
    results = []
    for m in todo:
        status, sec, by = run(m, args.timeout)
        results.append(
            {
                "name": m.name,
                "file": m.path,
                "status": status,
                "killed_by": by,
                "seconds": round(sec, 1),
                "why": m.why,
            }
        )
        print(f"{m.name:<28} {status:<10} {sec:6.1f}s  {m.path}  {by}", flush=True)
    killed = sum(r["status"].startswith("killed") for r in results)
    valid = sum(r["status"] != STALE for r in results)
    print(f"killed {killed} / {valid} ({100 * killed / max(1, valid):.0f}%)")
    for r in results:
        if r["status"] == "survived":
            print(f"  survived: {r['name']} ({r['why'] or r['file']})")
    for r in results:
        if r["status"] == STALE:
            print(f"  STALE, not run (update its snippet to the current code): {r['name']} ({r['file']})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
