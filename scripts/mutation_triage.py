"""Re-run a mutmut shard's survivors against tests written after it ran (docs/testing.md, issue 35).

A shard (``scripts/mutation_shard.sh DIR ...``) records a mutant as survived when its own test selection
passed. Adding the new tests to that selection would make mutmut reset every verdict and run the whole shard
again; this runs only the survivors (and the mutants with no test), each under ``MUTANT_UNDER_TEST`` with the
shard's mutated sources, against ``TESTS`` copied from this checkout into the shard:

    python scripts/mutation_triage.py DIR tests/construct/bounds/test_mutants_ranges.py [--json SHARD.json]

A mutant is killed when the tests fail on it. Equivalents (``docs/results/mutation_equivalent.json``) are
not run. The tests must pass with no mutant active (checked first: otherwise every mutant would look killed).
``--json`` adds ``after_triage`` (the shard's counts with these kills), ``killed_by_new_tests``,
``left_untriaged`` and ``triage_command`` to the shard's JSON (a path in this checkout).

The shard's directory is needed (its mutated sources and mutmut's verdicts). Without it, the JSON's
``survivors`` (written by ``scripts/mutation_score.py``) re-run as a shard of their own, with the new tests
added to the selection: ``MUTANTS="<survivors>" scripts/mutation_shard.sh DIR MODULES "TESTS NEW_TESTS"``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = ROOT / "docs/results/mutation_equivalent.json"


def _results(shard: Path) -> dict[str, str]:
    """``{mutant: status}`` from ``mutmut results --all true`` in the shard."""
    out = subprocess.run(
        ["mutmut", "results", "--all", "true"], cwd=shard, capture_output=True, text=True, check=True
    ).stdout
    status = {}
    for line in out.splitlines():
        name, sep, st = line.strip().rpartition(": ")
        if sep:
            status[name] = st
    return status


def _fails(shard: Path, tests: list[str], mutant: str | None) -> bool:
    env = {
        **os.environ,
        "PYTHONPATH": str(shard / "mutants/src"),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env.pop("MUTANT_UNDER_TEST", None)
    if mutant is not None:
        env["MUTANT_UNDER_TEST"] = mutant
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *tests]
    r = subprocess.run(cmd, cwd=shard, env=env, capture_output=True, text=True)
    # 1: a test failed; 2: collection stopped (the mutant breaks an import): both kill it
    if r.returncode not in (0, 1, 2) or (mutant is None and r.returncode == 2):
        sys.exit(
            f"pytest exited {r.returncode} for {mutant or 'no mutant'}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
        )
    return r.returncode != 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shard", type=Path, help="the shard's directory (scripts/mutation_shard.sh DIR)")
    ap.add_argument("tests", nargs="+", help="test files of this checkout (paths from its root)")
    ap.add_argument("--json", type=Path, help="the shard's JSON in this checkout, to add after_triage to")
    args = ap.parse_args()
    shard = args.shard.resolve()
    if not (shard / "mutants").is_dir():
        sys.exit(
            f"{shard} is not a mutmut shard (no mutants/ there); if it is gone, re-run the survivors its JSON"
            ' lists: MUTANTS="<its survivors>" scripts/mutation_shard.sh DIR MODULES "TESTS NEW_TESTS"'
        )
    for t in args.tests:
        src = ROOT / t
        if not src.is_file():
            sys.exit(f"no test file {t} in {ROOT}")
        (shard / t).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, shard / t)
    if _fails(shard, args.tests, None):
        sys.exit("the tests fail with no mutant active: fix them first")
    equivalent = set(json.loads(EQUIVALENT.read_text(encoding="utf-8"))["mutants"])
    status = _results(shard)
    todo = sorted(m for m, st in status.items() if st in ("survived", "no tests") and m not in equivalent)
    killed, left = [], []
    for i, m in enumerate(todo, 1):
        dead = _fails(shard, args.tests, m)
        (killed if dead else left).append(m)
        print(f"[{i}/{len(todo)}] {m}: {'killed' if dead else 'SURVIVED'}", flush=True)
    print(f"{len(killed)} of {len(todo)} killed; left: {left}")
    if args.json is not None:
        doc = json.loads((ROOT / args.json).read_text(encoding="utf-8"))
        after = {}
        for key, row in doc["modules"].items():
            prefix = row["name"] + "."
            k = sum(m.startswith(prefix) for m in killed)
            left_here = sum(m.startswith(prefix) for m in left)
            r = dict(row)
            r["killed"] = row["killed"] + row.get("timeout", 0) + k
            r["survived"], r["no_tests"] = left_here, 0
            r.pop("timeout", None)
            r.pop("name", None)
            # untested mutants killed now or still left count in the denominator as before
            den = r["killed"] + r["survived"]
            r["score"] = r["killed"] / den if den else None
            after[key] = r
        doc["after_triage"] = after
        doc["killed_by_new_tests"] = killed
        doc["left_untriaged"] = left
        doc["triage_command"] = "python scripts/mutation_triage.py DIR " + " ".join(args.tests)
        (ROOT / args.json).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
