PYTHON ?= python3
PIP_INSTALL = $(PYTHON) -m pip install --quiet -c constraints.txt

.PHONY: install install-test install-mutation demo test lint bench mutation

install:
	$(PIP_INSTALL) -e '.[transformers]'

install-test:
	$(PIP_INSTALL) -e '.[test,transformers]'

# The action's main job on the shipped examples, in dry-run: writes out/demo/results.json
# and out/demo/report.md, posts nothing (no GitHub needed).
demo: install
	INPUT_SCRIPT="examples/*.py" INPUT_OUT=out/demo INPUT_REPEAT=10 \
		$(PYTHON) entrypoint.py --dry-run
	@echo "report: out/demo/report.md  results: out/demo/results.json"

# Two workers; --dist loadfile keeps each file on one worker so module-scoped fixtures (exports,
# action runs) are built once.
test: install-test
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	lint-imports
	$(PYTHON) -m mypy
	$(PYTHON) -m pytest -q -n 2 --dist loadfile tests

install-mutation:
	$(PIP_INSTALL) -e '.[test,transformers,mutation]'

# Mutation testing of the core modules, one at a time with a time budget each (not in CI:
# minutes per module). Prints the share of mutants killed per module; survivors are listed in
# build/mutation/<module>.survivors. MODULES="diff rules" runs some; MUTATION_BUDGET_S caps
# each module (default 600 s); MUTATION_JOBS sets parallel workers (default 2).
mutation: install-mutation
	$(PYTHON) tools/mutation.py $(MODULES)

bench: install
	$(PYTHON) benchmarks/bench_observer.py
	$(PYTHON) benchmarks/bench_pipeline.py
	$(PYTHON) benchmarks/image_size.py
