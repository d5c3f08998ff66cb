#!/usr/bin/env bash
# One mutmut shard (docs/testing.md, "Mutation testing with mutmut"): mutate only MODULES (paths under
# src/icdl/) and run only TESTS (paths under tests/) per mutant, in a copy of the checkout at DIR (mutmut
# writes mutants/ there; the checkout is not touched). Resumable: run it again with the same DIR to go on.
#
#   scripts/mutation_shard.sh DIR "construct/check/report.py construct/store.py" \
#       "construct/check/test_mutants_verify_report.py construct/check/test_verify.py" [JSON]
#
# Prints the score table (scripts/mutation_score.py, equivalents from docs/results/mutation_equivalent.json)
# and writes it to JSON when given (a path relative to the checkout). A shard's score counts only its
# tests: with the whole suite it can only be higher.
#
# MUTANTS="glob ..." (mutmut's mutant names, e.g. "icdl.construct.check.verify.x_report__mutmut_*") checks
# only those mutants: the functions a stopped shard did not reach (mutmut checks in a fixed order).
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 DIR MODULES TESTS [JSON]" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$1 modules=$2 tests=$3 json=${4:-}
mkdir -p "$dir"
cp -r "$root/src" "$root/tests" "$root/scripts" "$dir/"
find "$dir" -name __pycache__ -prune -exec rm -rf {} +
python - "$root/pyproject.toml" "$dir/pyproject.toml" "$modules" "$tests" <<'PY'
import re
import sys

src, dst, modules, tests = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
text = open(src, encoding="utf-8").read()
mods = ", ".join(f'"src/icdl/{m}"' for m in modules)
sel = ", ".join(f'"tests/{t}"' for t in tests)
text = re.sub(r"only_mutate = \[.*?\]", f"only_mutate = [{mods}]", text, flags=re.S)
text = re.sub(r"pytest_add_cli_args_test_selection = \[.*?\]", f"pytest_add_cli_args_test_selection = [{sel}]", text, flags=re.S)
open(dst, "w", encoding="utf-8").write(text)
PY
mkdir -p "$dir/mutants/src"
cd "$dir"
start=$(date +%s)
set -f  # the names are mutmut's globs, not the shell's
names=(${MUTANTS:-})
set +f
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH="$dir/mutants/src" nice -n 10 mutmut run --max-children 1 ${names[@]+"${names[@]}"}
seconds=$(( $(date +%s) - start ))
args=(--equivalent "$root/docs/results/mutation_equivalent.json")
if [ -n "$json" ]; then
    cmd="scripts/mutation_shard.sh DIR \"$modules\" \"$tests\""
    if [ -n "${MUTANTS:-}" ]; then cmd="MUTANTS=\"$MUTANTS\" $cmd"; fi
    args+=(--json "$root/$json" --seconds "$seconds" --command "$cmd")
fi
python "$root/scripts/mutation_score.py" "${args[@]}"
