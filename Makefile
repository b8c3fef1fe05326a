# The README's two commands are `make run` and `make test`; both set up everything they need
# (venv + pinned Python deps, npm deps for dynalite, trained models) and are idempotent.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.deps-installed
NODE_STAMP := node_modules/.deps-installed
CONFIG ?= serve_config.yaml
PLAYERS ?= 10000
PROFILE ?= standard

.PHONY: setup models run test bench reliability lint

setup: $(PY_STAMP) $(NODE_STAMP)

$(PY_STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,bench]'
	@touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Train (or find cached) every ensemble version serve_config.yaml serves.
models: setup
	$(BIN)/offers prepare --config $(CONFIG)

# dynalite + seed + `serve run serve_config.yaml` in the foreground; Ctrl-C stops it all.
run: setup
	$(BIN)/offers run-local --config $(CONFIG) --players $(PLAYERS)

# Lint first: CI runs `make test`, so the layer rules and mypy strict are checked there too.
test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The ensemble against legacy and the process pool in interleaved rounds; report in
# loadtest/results/<timestamp>/ (README, Benchmark).
bench: setup
	$(BIN)/python -m loadtest.bench --profile $(PROFILE) $(BENCH_ARGS)

# The SLA at the client under overload, bursts and faults (replica, node, DynamoDB), on a
# 2-node local Ray cluster serving $(CONFIG); loadtest/results/<timestamp>/reliability.json.
reliability: setup
	$(BIN)/python -m loadtest.reliability --config $(CONFIG) $(RELIABILITY_ARGS)

# ruff everywhere; mypy --strict on the service package; the layer rules (import-linter).
lint: setup
	$(BIN)/ruff check app models loadtest tests
	$(BIN)/mypy
	$(BIN)/lint-imports
