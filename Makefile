PYTHON ?= python3
PIP_INSTALL = $(PYTHON) -m pip install --quiet -c constraints.txt

.PHONY: install install-test demo test lint bench

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

test: install-test
	$(PYTHON) -m ruff check .
	$(PYTHON) -m pytest -q tests

bench: install
	$(PYTHON) benchmarks/bench_observer.py
	$(PYTHON) benchmarks/bench_pipeline.py
	$(PYTHON) benchmarks/image_size.py
