"""Mutation score per module and per package from mutmut's results (``make mutate``; docs/testing.md).

Reads ``mutmut results --all true`` (run in the repository root, after ``mutmut run``), counts each
module's mutants by status and prints a table; ``--json F`` writes it (with the command, the mutmut
version and the survivors' names). A mutant is *killed* when a test failed on it (a *timeout*, a test run
past its time limit, counts as killed too); *survived* when every test that reaches its function passed;
*no tests* when no test reaches it; *not checked* when the (resumable) run has not got to it yet. A
survivor or untested mutant listed in ``--equivalent`` (default ``docs/results/mutation_equivalent.json``:
``{"mutants": {name: reason}}``) is *equivalent*: no test can kill it, and it is left out of the score. The
score is killed / (killed + survived + no tests): a mutant without a test counts against it; equivalent and
unchecked ones do not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter, defaultdict
from importlib import metadata
from pathlib import Path

STATUSES = {
    "killed": "killed",
    "timeout": "timeout",
    "survived": "survived",
    "no tests": "no_tests",
    "not checked": "not_checked",
    "checked": "not_checked",
}
COLUMNS = ("killed", "timeout", "survived", "no_tests", "equivalent", "not_checked")
EQUIVALENT = Path("docs/results/mutation_equivalent.json")


def parse(text: str, equivalent: frozenset[str] = frozenset()) -> dict[str, Counter[str]]:
    """``{module: Counter(status)}`` from the lines ``<module>.<function>__mutmut_<i>: <status>``; a survived
    or untested mutant named in ``equivalent`` is counted as ``equivalent``."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for line in text.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if not sep or "__mutmut_" not in name:
            continue
        head = name.split("__mutmut_")[0]
        parts = head.split(".")
        # icdl.pkg.module.x_function or icdl.pkg.module.xǁClassǁmethod: the module is the dotted prefix
        module = ".".join(p for p in parts[:-1])
        kind = STATUSES.get(status, status.replace(" ", "_"))
        if kind in ("survived", "no_tests") and name in equivalent:
            kind = "equivalent"
        out[module][kind] += 1
    return out


def survivors(text: str, equivalent: frozenset[str] = frozenset()) -> list[str]:
    """The names of the survived and untested mutants not in ``equivalent``, sorted: what a triage re-runs
    (``MUTANTS="..." scripts/mutation_shard.sh`` with the new tests), kept in the JSON so that it does not
    need the shard's directory."""
    out = []
    for line in text.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name and status in ("survived", "no tests") and name not in equivalent:
            out.append(name)
    return sorted(out)


def score(c: Counter[str]) -> float | None:
    """killed (with timeouts) over killed + survived + no tests; None when none is judged yet."""
    detected = c["killed"] + c["timeout"]
    judged = detected + c["survived"] + c["no_tests"]
    return None if judged == 0 else detected / judged


def packages(table: dict[str, Counter[str]]) -> dict[str, Counter[str]]:
    """The modules' counts summed per package (``icdl.construct``, ``icdl.icl``)."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for module, c in table.items():
        out[".".join(module.split(".")[:2])] += c  # icdl.construct.check.report -> icdl.construct
    return out


def json_key(module: str) -> str:
    """A module's key in the JSON: its path below the package, ``_``-joined (``icdl.construct.check.report``
    -> ``check_report``; ``icdl.construct`` -> ``construct``): docs/ markers address keys by dotted paths."""
    parts = module.split(".")
    return "_".join(parts[2:]) if len(parts) > 2 else parts[-1]


def load_equivalent(path: Path) -> dict[str, str]:
    """``{mutant name: one-line reason}`` from ``path`` (empty when it does not exist)."""
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text(encoding="utf-8"))["mutants"])


def mutmut_config(path: Path) -> dict[str, list[str]]:
    """What was mutated and which tests ran: ``only_mutate`` and the test selection of ``[tool.mutmut]``."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: not recorded
        return {}
    if not path.is_file():
        return {}
    cfg = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("mutmut", {})
    tests = cfg.get("pytest_add_cli_args_test_selection", [])
    return {"only_mutate": cfg.get("only_mutate", []), "tests": tests}


def _row(name: str, c: Counter[str]) -> dict[str, str | float | int | None]:
    return {"name": name} | {k: c[k] for k in COLUMNS} | {"score": score(c)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the table as JSON")
    ap.add_argument("--equivalent", type=Path, default=EQUIVALENT, help="the equivalent mutants and why")
    ap.add_argument("--command", default="make mutate", help="the mutmut run to record in the JSON")
    ap.add_argument("--seconds", type=float, help="the run's wall-clock time, to record in the JSON")
    args = ap.parse_args(argv)
    try:
        equivalent = load_equivalent(args.equivalent)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cannot read {args.equivalent}: {exc}", file=sys.stderr)
        return 2
    proc = subprocess.run(["mutmut", "results", "--all", "true"], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"mutmut results failed: {proc.stderr.strip()}", file=sys.stderr)
        return 2
    table = parse(proc.stdout, frozenset(equivalent))
    pkgs = packages(table)
    print(f"{'module':32s} " + " ".join(f"{k.replace('_', ' '):>11s}" for k in COLUMNS) + f" {'score':>6s}")
    for name, c in [*sorted(table.items()), *sorted(pkgs.items())]:
        s = score(c)
        shown = "-" if s is None else f"{100 * s:.1f}%"
        print(f"{name:32s} " + " ".join(f"{c[k]:11d}" for k in COLUMNS) + f" {shown:>6s}")
    if args.json:
        doc = {
            "command": args.command,
            "seconds": args.seconds,
            "mutmut": metadata.version("mutmut"),
            "config": mutmut_config(Path("pyproject.toml")),
            "equivalent": args.equivalent.name,
            "modules": {json_key(m): _row(m, c) for m, c in sorted(table.items())},
            "packages": {json_key(p): _row(p, c) for p, c in sorted(pkgs.items())},
            "survivors": survivors(proc.stdout, frozenset(equivalent)),
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
