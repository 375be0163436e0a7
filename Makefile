# confidential.tee: the two commands are `make demo` and `make test` (see README.md).
# Everything else here is a building block of those two.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
BUILD := $(abspath .build)
# Ansible finds this checkout as the collection confidential.tee through a symlink in the build dir.
COLLECTIONS := $(BUILD)/collections
COLLECTION_LINK := $(COLLECTIONS)/ansible_collections/confidential/tee
export ANSIBLE_CONFIG := $(abspath ansible.cfg)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export PATH := $(BIN):$(PATH)

.PHONY: help venv collection demo fleet-report test lint sanity pytest molecule sysdeps benchmark clean

help:
	@echo "make demo   - simulated TDX node: plan, validate, simulate, report"
	@echo "make fleet-report - simulated mixed fleet: preflight, key drift against Kubernetes, HTML/Markdown/JSON/.prom"
	@echo "make test   - every test: lint, ansible-test sanity, pytest (unit, integration, simulator), molecule"
	@echo "make benchmark - module and simulator benchmarks (prints figures, asserts nothing)"

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The dask extra too (39 MiB, ~10 s): so that the sweep's Dask test runs here and in CI.
	$(BIN)/python -m pip install --quiet -e '.[dev,dask]'
	touch $@

venv: $(BIN)/.installed

$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn ../../../.. $@

collection: venv $(COLLECTION_LINK)

demo: collection
	$(BIN)/python scripts/demo.py

fleet-report: collection
	$(BIN)/python scripts/fleet_report.py

lint: collection
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint --offline --profile production

sanity: collection
	scripts/ansible-test.sh sanity

# Two workers, whole files per worker (a file's real sockets and playbooks stay in one process): about 1,240 tests in 5 to 7 min on 2 cores.
pytest: collection
	$(BIN)/python -m pytest -n 2 --dist loadfile

sysdeps:
	scripts/sysdeps.sh

molecule: collection sysdeps
	scripts/molecule.sh

# sysdeps first: Molecule needs podman, the fleet report's browser test Debian's chromium.
test: sysdeps lint sanity pytest molecule

benchmark: collection
	$(BIN)/python benchmarks/bench_modules.py
	$(BIN)/python benchmarks/profile_host_info.py
	$(BIN)/python benchmarks/bench_fleet.py
	$(BIN)/python benchmarks/bench_simulator.py
	$(BIN)/python benchmarks/bench_sweep.py
	$(BIN)/python benchmarks/bench_grpc_latency.py

clean:
	rm -rf $(BUILD) tests/output .pytest_cache .ruff_cache .hypothesis
