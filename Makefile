# The README's two commands are `make run` and `make test`; both set up everything they need
# (venv + pinned Python deps, npm deps for dynalite, Debian's Prometheus binary for the
# metrics tests, trained models) and are idempotent.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.deps-installed
NODE_STAMP := node_modules/.deps-installed
PROM_DIR := .local/prometheus
PROM_STAMP := $(PROM_DIR)/.installed
CONFIG ?= serve_config.yaml
PLAYERS ?= 10000
PROFILE ?= standard

.PHONY: setup serve-setup models run test bench reliability autoscaling lint dashboard k8s batch batch-bench

setup: $(PY_STAMP) $(NODE_STAMP) $(PROM_STAMP)

# What serving needs (`make run`, training, the batch job): not Prometheus, which only the
# metrics tests query (its first download may need `apt-get update`, root on most machines).
serve-setup: $(PY_STAMP) $(NODE_STAMP)

# A venv without pip (Debian's python3 lacks ensurepip until python3.11-venv is installed;
# the failed `venv` leaves bin/python behind) is made again, not reused.
$(PY_STAMP): pyproject.toml constraints.txt tools/install_deps.py
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
		|| { echo "Python 3.11 is required (pyproject.toml): make PYTHON=python3.11 ..."; exit 1; }
	@$(BIN)/python -m pip --version >/dev/null 2>&1 \
		|| { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python tools/install_deps.py
	@touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Debian's Prometheus binary for the tests that query a real one (app/local/prometheus.py):
# the .deb is downloaded and unpacked, never installed, so no system service or user is
# created. Its Go binary links only libc; `--version` proves it runs here. The package lists
# are refreshed only when the download fails without them (a fresh machine).
$(PROM_STAMP):
	rm -rf $(PROM_DIR) && mkdir -p $(PROM_DIR)/deb
	cd $(PROM_DIR)/deb && { apt-get download -qq prometheus \
		|| { apt-get update -qq && apt-get download -qq prometheus; }; }
	dpkg-deb -x $(PROM_DIR)/deb/prometheus_*.deb $(PROM_DIR)
	rm -rf $(PROM_DIR)/deb
	$(PROM_DIR)/usr/bin/prometheus --version
	@touch $@

# Train (or find cached) every ensemble version serve_config.yaml serves.
models: serve-setup
	$(BIN)/offers prepare --config $(CONFIG)

# dynalite + seed + `serve run serve_config.yaml` in the foreground; Ctrl-C stops it all.
run: serve-setup
	$(BIN)/offers run-local --config $(CONFIG) --players $(PLAYERS)

# The KubeRay CRDs the k8s/ manifests are validated against (tests/unit/k8s); point it at
# your cluster's (`kubectl get crd rayservices.ray.io -o yaml > DIR/ray.io_rayservices.yaml`).
KUBERAY_CRD_DIR ?= $(abspath ../shared/kuberay)
export KUBERAY_CRD_DIR

# Score every player of one served version offline (Ray Data) into Parquet and the
# precomputed-offers snapshot: `make batch GAME=galaxy-raiders VERSION=2026-11`; last line
# `output: <folder>`. BATCH_ARGS go to offers-batch (e.g. "--segments 8 --read-budget 2000").
batch: serve-setup
	@test -n "$(GAME)" -a -n "$(VERSION)" || { echo "usage: make batch GAME=<game> VERSION=<version>"; exit 2; }
	$(BIN)/offers batch --config $(CONFIG) --game $(GAME) --version $(VERSION) --players $(PLAYERS) -- $(BATCH_ARGS)

# The batch job against the model-compute limit on a seeded dynalite (>= 100,000 players),
# in interleaved rounds; loadtest/results/<timestamp>-batch/report.json (README, Batch).
batch-bench: setup
	$(BIN)/python -m loadtest.batch_bench $(BATCH_BENCH_ARGS)

# Lint first: CI runs `make test`, so the layer rules and mypy strict are checked there too.
# Two pytest processes (tests/__main__.py): the Ray-cluster and timed tests in the
# foreground, the `untimed` ones beside them at SCHED_IDLE. `PYTEST_ARGS` (a selection,
# `-x`, ...) runs one pytest with them instead.
test: lint
	$(BIN)/python -m tests $(PYTEST_ARGS)

# The ensemble against legacy and the process pool in interleaved rounds; report in
# loadtest/results/<timestamp>/ (README, Benchmark).
bench: setup
	$(BIN)/python -m loadtest.bench --profile $(PROFILE) $(BENCH_ARGS)

# The SLA at the client under overload, bursts and faults (replica, node, DynamoDB), on a
# 2-node local Ray cluster serving $(CONFIG); loadtest/results/<timestamp>/reliability.json.
reliability: setup
	$(BIN)/python -m loadtest.reliability --config $(CONFIG) $(RELIABILITY_ARGS)

# The login day against the shipped config with room to grow (members up to 3 replicas):
# replicas per deployment over time, errors, and replica-/CPU-seconds against a static
# layout provisioned for the peak; loadtest/results/<timestamp>-autoscaling/.
autoscaling: setup
	$(BIN)/python -m loadtest.autoscaling --config $(CONFIG) $(AUTOSCALING_ARGS)

# The Grafana dashboard (app/local/grafana/offers-dashboard.json) from the metrics contract;
# a unit test fails when the committed file differs from a fresh render.
dashboard: setup
	$(BIN)/python -m app.local.dashboard

# k8s/ (RayService, IAM, Dockerfile, ...) from serve_config.yaml and k8s/profile.yaml; a unit
# test fails when the committed files differ from a fresh render.
k8s: setup
	$(BIN)/python -m app.k8s

# ruff everywhere; mypy --strict on the service package; the layer rules (import-linter).
lint: setup
	$(BIN)/ruff check app models loadtest tests tools
	$(BIN)/mypy
	$(BIN)/lint-imports
