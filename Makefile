# One place for the commands the README and CI use.
PY ?= python3

.PHONY: install test test-all lint typecheck bench demo docs docs-serve tutorial mutate mutate-score

# The README's CPU route: torch's CPU build from PyTorch's CPU wheel index, before icdl (so pip never pulls
# a CUDA build). `make install TORCH_INDEX=` keeps pip's own index (a machine whose pip is set up already);
# on a GPU machine install the CUDA torch first (README, "Set-up") and run `pip install -e '.[dev,interp]'`.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

install:
	$(PY) -m pip install torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -e '.[dev,interp]'

# Fast tier: two workers with one thread each (two 2-thread workers on 2 cores run ~12x slower).
test:
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n 2 -m "not slow" tests

test-all:
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n 2 tests

# lint-imports: the package's layering (the [tool.importlinter] contracts in pyproject.toml)
lint:
	ruff check . && ruff format --check . && $(PY) -m mypy && lint-imports

typecheck:
	$(PY) -m mypy && lint-imports

demo:
	icdl demo

# The benchmark regression suite (docs/benchmarks.md): a fixed small set of hot paths as ratios to
# in-process references, compared with docs/results/bench_baseline.json; exits 1 on a ratio > 15% above
# it. A few minutes on one thread; this run's JSON goes to bench-latest.json.
bench:
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) benchmarks/regress.py

# The docs site (mkdocs-material + mkdocstrings): warnings are errors. The tutorial page (docs/tutorial.md) is
# executed at every build (mkdocs-jupyter), outputs and figures included; the other pages' code blocks run
# in `make test` (tests/test_docs.py).
# scripts/jupyter (on JUPYTER_CONFIG_PATH): the build talks to the tutorial's kernel over IPC sockets, not
# unencrypted TCP on localhost (which the kernel warns about at every build).
JUPYTER_DOCS = JUPYTER_CONFIG_PATH=$(CURDIR)/scripts/jupyter$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}

docs:
	$(JUPYTER_DOCS) NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

docs-serve:
	$(PY) -m mkdocs serve

# docs/tutorial.md as an executed notebook with its figures (written to docs/tutorial.ipynb, not committed).
tutorial:
	$(PY) scripts/run_tutorial.py docs/tutorial.ipynb

# Mutation testing with mutmut 3 (outside CI; pip install -e '.[mutate]'): the files and tests in
# [tool.mutmut] (pyproject.toml). Resumable: an interrupted run goes on where it stopped. A shard is a
# mutant-name glob, e.g. `make mutate MUTANTS='icdl.construct.bounds.ranges*'`. docs/testing.md has the scores.
MUTANTS ?=
mutate:
	mkdir -p mutants/src  # on sys.path before the checkout (an editable install elsewhere would win)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$(CURDIR)/mutants/src mutmut run --max-children 1 $(if $(MUTANTS),"$(MUTANTS)",)
	$(PY) scripts/mutation_score.py

mutate-score:
	$(PY) scripts/mutation_score.py --json docs/results/mutation_score.json
