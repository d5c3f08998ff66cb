"""Mutation score per module from mutmut's results (``make mutate``; docs/testing.md).

Reads ``mutmut results --all true`` (run in the repository root, after ``mutmut run``), counts each
module's mutants by status and prints a table; ``--json F`` writes it (with the command and the mutmut
version). A mutant is *killed* when a test failed on it; *survived* when every test that reaches its
function passed; *no tests* when no test reaches it; *not checked* when the (resumable) run has not got
to it yet. The score is killed / (killed + survived + no tests): mutants without a test count against it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter, defaultdict
from importlib import metadata
from pathlib import Path

STATUSES = {"killed": "killed", "survived": "survived", "no tests": "no_tests", "checked": "not_checked"}


def parse(text: str) -> dict[str, Counter[str]]:
    """``{module: Counter(status)}`` from the lines ``<module>.<function>__mutmut_<i>: <status>``."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for line in text.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if not sep or "__mutmut_" not in name:
            continue
        head = name.split("__mutmut_")[0]
        parts = head.split(".")
        # icdl.pkg.module.x_function or icdl.pkg.module.xǁClassǁmethod: the module is the dotted prefix
        module = ".".join(p for p in parts[:-1])
        out[module][STATUSES.get(status, status.replace(" ", "_"))] += 1
    return out


def score(c: Counter[str]) -> float | None:
    judged = c["killed"] + c["survived"] + c["no_tests"]
    return None if judged == 0 else c["killed"] / judged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the table as JSON")
    args = ap.parse_args(argv)
    proc = subprocess.run(["mutmut", "results", "--all", "true"], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"mutmut results failed: {proc.stderr.strip()}", file=sys.stderr)
        return 2
    table = parse(proc.stdout)
    rows = {}
    print(f"{'module':40s} {'killed':>7s} {'survived':>8s} {'no tests':>8s} {'unchecked':>9s} {'score':>6s}")
    for module in sorted(table):
        c = table[module]
        s = score(c)
        rows[module] = {k: c[k] for k in ("killed", "survived", "no_tests", "not_checked")} | {"score": s}
        shown = "-" if s is None else f"{100 * s:.1f}%"
        print(
            f"{module:40s} {c['killed']:7d} {c['survived']:8d} {c['no_tests']:8d} {c['not_checked']:9d} "
            f"{shown:>6s}"
        )
    if args.json:
        doc = {
            "command": "make mutate && python scripts/mutation_score.py",
            "mutmut": metadata.version("mutmut"),
            "modules": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
