# Every target runs in a virtualenv: the active one, else the project's .venv, which
# tools/install.py creates (so Debian's externally-managed python, macOS's and a CI runner's
# all work). torch comes from the PyTorch CPU wheel index (TORCH_INDEX_URL; empty: pip's own
# indexes; an index that does not answer is skipped), TORCH_SPEC overrides the requirement
# (a CUDA build, a local wheel). BOOTSTRAP_PYTHON makes the .venv.
BOOTSTRAP_PYTHON ?= python3
PYTHON := $(shell $(BOOTSTRAP_PYTHON) tools/install.py --which)
INSTALL = $(BOOTSTRAP_PYTHON) tools/install.py
LINT_IMPORTS = $(PYTHON) -c "from importlinter.cli import lint_imports_command as c; c()"

.PHONY: install install-test install-mutation demo test lint bench mutation render-deps test-render

install:
	$(INSTALL) transformers

install-test:
	$(INSTALL) test,transformers

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
	$(LINT_IMPORTS)
	$(PYTHON) -m mypy
	$(MAKE) --no-print-directory lint-workflows check-dist
	$(PYTHON) -m pytest -q -n 2 --dist loadfile tests

# Every workflow, the README's example workflows and both action.yml: zizmor (offline, medium
# and above) and GitHub's schemas (check-jsonschema's vendored copies). tools/lint_workflows.py
# The package: sdist and wheel built, twine check, the wheel alone in a fresh venv runs
# `observer-ci --help`. tools/check_dist.py
.PHONY: lint-workflows check-dist
lint-workflows:
	$(PYTHON) tools/lint_workflows.py

check-dist:
	$(PYTHON) tools/check_dist.py

# The golden reports laid out in headless Chromium with Mermaid (tests/render/), screenshots in
# build/render/. Separate from `make test`: it needs Debian's chromium (apt, as root: about a
# minute, once) and mermaid from npm (tools/render, pinned by its lock: about 15 s, once).
render-deps:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || { echo "render-deps: installing chromium (apt-get, about a minute)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-color-emoji >/dev/null; }
	@test -f tools/render/node_modules/mermaid/dist/mermaid.min.js || { echo "render-deps: installing mermaid (npm ci, about 15 s)"; \
		cd tools/render && npm ci --no-audit --no-fund --silent; }

test-render: install-test render-deps
	OBSERVER_CI_RENDER=1 $(PYTHON) -m pytest -q tests/render

install-mutation:
	$(INSTALL) test,transformers,mutation

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
