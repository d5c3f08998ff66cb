# ruff: noqa: E501 (a table of planted source lines, kept one per entry)
"""A held-out set of single changes at verifier sites (issue 35), planted by hand after the mutmut shards.

Each plant goes into a fresh clone of this checkout (``git clone``: the committed tree), and
``pytest -x -n 2 -m "not slow" tests/construct tests/cli`` runs on it with one thread per worker. A plant
is killed when that run fails. Results go to ``--out`` (docs/results/mutation_heldout.json):

    python scripts/mutation_heldout.py --work /tmp/heldout --out docs/results/mutation_heldout.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

V = "src/icdl/construct/check/verify.py"
PLANTS: list[tuple[str, str, str, str]] = [
    (V, "            ze = z[:n]\n", "            ze = z\n", "relu' window counts the query token too"),
    (V, "c.window += int(((ze > 0) & (ze < cfg.delta)).sum())",
     "c.window += int(((ze >= 0) & (ze < cfg.delta)).sum())", "window counts exact zeros (dead units)"),
    (V, "c.step_range += int((z.abs() >= step_limit).sum())",
     "c.step_range += int((z.abs() > step_limit).sum())", "step limit exclusive"),
    (V, "c.range += int((z.abs() > cfg.radius).sum())", "c.range += int((z.abs() > 2 * cfg.radius).sum())",
     "range check with twice the radius"),
    (V, "c.gate_margin = min(c.gate_margin, cfg.gate - arg)", "c.gate_margin = max(c.gate_margin, cfg.gate - arg)",
     "gate margin keeps the best unit"),
    (V, "            inside = z[z.abs() <= terms.radius]\n", "            inside = z[z.abs() <= 2 * terms.radius]\n",
     "declared check outside the fitted range"),
    (V, "    if len(c.budgets) >= model.steps:\n", "    if len(c.budgets) > model.steps:\n",
     "one budget too many (the readout's)"),
    (V, "    return delta * 2.0 / torch.finfo(dtype).eps", "    return delta * 4.0 / torch.finfo(dtype).eps",
     "relu' step limit twice too large"),
    (V, "        if err == -math.inf:  # no factor pair inside its box this step",
     "        if err < 0:  # no factor pair inside its box this step", "negative product errors skipped"),
    (V, "            err = float(((terms(inside) - exact).abs() - tol * exact.abs().clamp_min(1.0)).max())",
     "            err = float(((terms(inside) - exact).abs() - tol * exact.abs().clamp_min(10.0)).max())",
     "declared check with 10x slack"),
]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="scratch folder for the clones")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    results = []
    for i, (f, old, new, desc) in enumerate(PLANTS):
        d = args.work / f"c{i}"
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", str(root), str(d)], check=True)
        text = (d / f).read_text()
        if text.count(old) != 1:
            sys.exit(f"plant {i} ({desc}): its site is not in {f} exactly once")
        (d / f).write_text(text.replace(old, new))
        env = {**os.environ, "PYTHONPATH": str(d / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-n",
            "2",
            "-m",
            "not slow",
            "-p",
            "no:cacheprovider",
        ]
        r = subprocess.run(
            [*cmd, "tests/construct", "tests/cli"], cwd=d, env=env, capture_output=True, text=True
        )
        first = [line for line in r.stdout.splitlines() if line.startswith("FAILED")][:1]
        results.append({"plant": i, "file": f, "change": desc, "killed_by_construct_cli": r.returncode != 0,
                        "first_failure": first})  # fmt: skip
        print(i, desc, "KILLED" if r.returncode else "SURVIVED", *first, flush=True)
    args.out.write_text(json.dumps({"command": "python scripts/mutation_heldout.py --work DIR --out FILE",
                                    "plants": results}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
