"""Evaluate several training seeds of one configuration and write the committed curves (docs/results/curves/).

Evaluates every run on every suite with the same options (``icdl evaluate``'s cache is reused when
current; run-independent baselines — ridge_tuned, kernel, mlp_tuned, gd_target — are computed once for
all seeds, since the seeds share the test prompts), then writes ``OUT_DIR/NAME.json``
([`icdl.icl.evaluation.curves.collect`][icdl.icl.evaluation.curves.collect]: R² per k per predictor per seed,
the aggregate over seeds with bands over seeds and prompts, the nonlinear skill) and ``OUT_DIR/NAME.md`` (its
tables)::

    OMP_NUM_THREADS=2 PYTHONPATH=src python scripts/curves.py cpu-centred \
        runs/cpu-centred-s0 runs/cpu-centred-s1 runs/cpu-centred-s2 \
        --suites in-distribution,long-prompts \
        --baselines averaging,ridge,ridge_tuned,kernel,mlp_tuned --out-dir docs/results/curves

``--no-evaluate`` only collects existing evaluations; ``--fill README.md docs/...`` regenerates the
headline tables between ``<!-- curves:NAME -->`` and ``<!-- /curves -->`` in those files. The command
line is recorded in the JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from icdl.errors import InputError
from icdl.icl.evaluation.curves import collect, fill_markers, markdown
from icdl.icl.evaluation.evaluate import EvalOptions, evaluate_run, parse_baselines
from icdl.io import atomic_write_json, atomic_write_text, portable_command


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("name", help="name of the curves file (OUT_DIR/NAME.json)")
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (training seeds of one config)")
    ap.add_argument("--suites", default="in-distribution,long-prompts")
    ap.add_argument("--baselines", default="averaging,ridge,ridge_tuned,kernel,mlp_tuned")
    ap.add_argument("--prompts", type=int, default=None, help="test prompts per condition [suite default]")
    d = EvalOptions()
    ap.add_argument("--mlp-tuned-prompts", type=int, default=d.mlp_tuned_prompts)
    ap.add_argument("--mlp-tune-prompts", type=int, default=d.mlp_tune_prompts)
    ap.add_argument("--resamples", type=int, default=d.resamples)
    ap.add_argument("--mlp-prompts", type=int, default=d.mlp_prompts, help="the paper's MLP (mlp)")
    ap.add_argument("--mlp-epochs", type=int, default=d.mlp_epochs, help="the paper's MLP (mlp)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-evaluate", action="store_true", help="only collect existing evaluations")
    ap.add_argument("--out-dir", type=Path, default=Path("docs/results/curves"))
    ap.add_argument(
        "--fill",
        type=Path,
        nargs="*",
        default=[],
        help="markdown files whose <!-- curves:NAME --> ... <!-- /curves --> blocks get the headline tables",
    )
    args = ap.parse_args(argv)
    argv_used = sys.argv[1:] if argv is None else argv
    command = "python scripts/curves.py " + portable_command(argv_used)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    try:
        if not args.no_evaluate:
            opts = EvalOptions(
                baselines=parse_baselines(args.baselines),
                mlp_tuned_prompts=args.mlp_tuned_prompts,
                mlp_tune_prompts=args.mlp_tune_prompts,
                resamples=args.resamples,
                mlp_prompts=args.mlp_prompts,
                mlp_epochs=args.mlp_epochs,
                cost=False,
            )
            for rd in args.runs:
                for suite in suites:
                    t0 = time.perf_counter()
                    res = evaluate_run(rd, suite, prompts=args.prompts, options=opts, device=args.device)
                    how = "cached" if res.get("from_cache") else f"{time.perf_counter() - t0:.0f} s"
                    print(f"{rd} {suite}: {how}", flush=True)
        curves = collect(args.name, args.runs, suites, command=command)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = atomic_write_json(args.out_dir / f"{args.name}.json", curves, indent=None)
    atomic_write_text(args.out_dir / f"{args.name}.md", markdown(curves))
    print(f"wrote {out} and {args.out_dir / (args.name + '.md')}")
    for doc in args.fill:
        atomic_write_text(doc, fill_markers(doc.read_text(encoding="utf-8"), curves))
        print(f"filled {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
