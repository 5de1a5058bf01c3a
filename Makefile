PYTHON ?= python3
PIP_INSTALL = $(PYTHON) -m pip install --quiet -c constraints.txt

.PHONY: install install-test demo test lint bench

install:
	$(PIP_INSTALL) -e '.[transformers]'

install-test:
	$(PIP_INSTALL) -e '.[test,transformers]'

demo: install
	$(PYTHON) -m observer_ci run examples/*.py --out out/demo --dry-run

test: install-test
	$(PYTHON) -m ruff check .
	$(PYTHON) -m pytest -q tests

bench: install
	$(PYTHON) benchmarks/bench_observer.py
	$(PYTHON) benchmarks/bench_pipeline.py
