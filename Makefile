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

.PHONY: help venv native collection demo fleet-report test test-checks test-builds lint sanity pytest molecule vm-image vm-image-grub vm-test vm-test-grub sysdeps benchmark clean upstream upstream-report k8s kube-up image node node-test

help:
	@echo "make demo   - simulated TDX node: plan, validate, simulate, report"
	@echo "make fleet-report - simulated mixed fleet: preflight, key drift against Kubernetes, HTML/Markdown/JSON/.prom"
	@echo "make test   - every test: lint, ansible-test sanity, pytest (unit, integration, simulator), molecule, the real-kernel VMs (make vm-test)"
	@echo "make vm-test - host roles on a real kernel: Debian 12 under QEMU (TCG), reboots through GRUB and systemd-boot (tests/vm)"
	@echo "make benchmark - module and simulator benchmarks (prints figures, asserts nothing)"
	@echo "make upstream-report - NFD's, KubeVirt's, kube-scheduler's and (root) the kubelet's own code against teesim's models (docs/simulator.md; needs Go)"
	@echo "make native - compile teesim's hot modules with mypyc (part of every target above but demo; TEESIM_NATIVE=0 skips it)"
	@echo "make k8s    - build etcd, kube-apiserver, kube-scheduler and kubectl from Go modules (cached; part of make test)"
	@echo "make kube-up - run that control plane on loopback until Ctrl-C (docs/DEVELOPMENT.md)"
	@echo "make image  - the key agent's container image with podman, from the Containerfile (no registry)"
	@echo "make node   - build a real node: the kubelet (same release), containerd, CNI plugins, the guest and pause images (cached)"
	@echo "make node-test - a real kubelet and containerd joined to that control plane run teesim's guests (root; tests/node)"

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The dask extra too (39 MiB, ~10 s): so that the sweep's Dask test runs here and in CI.
	$(BIN)/python -m pip install --quiet -e '.[dev,dask]'
	touch $@ $(BIN)/.installed-demo

# What `make demo` needs and nothing more (the `demo` extra); a venv with the dev tools has it already.
$(BIN)/.installed-demo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $@

venv: $(BIN)/.installed

# teesim's hot modules compiled with mypyc (simulator/teesim/_native.py): about twice as fast, the same
# results. Rebuilt when a simulator source changes (a stale build is never used); TEESIM_NATIVE=0 skips it.
NATIVE_MANIFEST := simulator/teesim/native.json
ifeq ($(TEESIM_NATIVE),0)
native:
else
$(NATIVE_MANIFEST): $(BIN)/.installed scripts/build_native.py $(shell find simulator/teesim -name '*.py')
	$(BIN)/python scripts/build_native.py

native: $(NATIVE_MANIFEST)
endif

$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn ../../../.. $@

collection: venv $(COLLECTION_LINK) native

# The demo uses the native build where this venv can make one (the dev tools' mypyc, from `make native` or any
# other target, and a C compiler); otherwise it says so and runs the same simulator from source.
demo: $(BIN)/.installed-demo $(COLLECTION_LINK)
	@if [ "$(TEESIM_NATIVE)" != 0 ] && [ -f $(BIN)/.installed ] && [ -x $(BIN)/mypyc ] && command -v cc >/dev/null; then \
	  $(MAKE) --no-print-directory native; \
	else \
	  echo "teesim native build: skipped (needs the dev tools' mypyc and a C compiler: make native); the simulator runs from source, about half as fast"; \
	fi
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

# Upstream programs the upstream checks run (NFD v0.19.0, KubeVirt v1.9.0's device plugins), built from the Go
# module proxy into ~/.cache/confidential-tee/upstream (upstream/build.sh; well under a second once cached).
# Without Go it says so and the upstream tests skip.
upstream:
	@if command -v go > /dev/null; then upstream/build.sh; else echo "make upstream: no go on PATH, the upstream tests skip"; fi

# The tables of docs/simulator.md, "Upstream code in the loop" (about 10 min: 60 served runs of 40 s, 6 at once;
# then kube-scheduler placing 90 runs' pods on make k8s's control plane, a few minutes; then, as root, the real kubelet
# of make node against teesim's kubelet model, about a minute: scripts/upstream_kubelet.py).
upstream-report: collection upstream k8s node
	$(BIN)/python scripts/upstream_nfd.py
	$(BIN)/python scripts/upstream_kubevirt.py
	$(BIN)/python scripts/upstream_scheduler.py
	$(BIN)/python scripts/upstream_kubelet.py

# Two workers, whole files per worker (a file's real sockets and playbooks stay in one process): about 1,240 tests in 5 to 7 min on 2 cores.
# Every test runs on the native build, the one make demo installs: TEESIM_NATIVE=1 makes a missing or stale build an
# error, never a quiet fall-back to the source. The tests of serve, the gRPC kubelet, the real plugins and the CLI
# then run again on the source (TEESIM_NATIVE=0): both builds must behave the same (issue 27).
BOTH_BUILDS_TESTS := tests/simulator/serve tests/simulator/kubelet tests/simulator/plugins tests/simulator/strategies/test_strategies.py \
	tests/simulator/external_plugins tests/simulator/test_grpc_run.py tests/simulator/test_cli_help.py \
	tests/simulator/test_cli_numbers.py tests/simulator/test_native_subclasses.py tests/simulator/report/test_cli_run.py \
	tests/simulator/kernel/test_cli.py tests/simulator/fixtures/test_fleet.py tests/simulator/report/test_engines.py \
	tests/simulator/report/test_sweep.py tests/simulator/sim/test_placer.py tests/upstream/test_scheduler_cli.py \
	tests/simulator/report/test_real_node.py
pytest: collection upstream
ifeq ($(TEESIM_NATIVE),0)
	$(BIN)/python -m pytest -n 2 --dist loadfile
else
	TEESIM_NATIVE=1 $(BIN)/python -m pytest -n 2 --dist loadfile --durations=30
	TEESIM_NATIVE=0 $(BIN)/python -m pytest -n 2 --dist loadfile $(BOTH_BUILDS_TESTS)
endif

sysdeps:
	scripts/sysdeps.sh

# The live tests' control plane (tests/live), built from the Go modules pinned in tools/k8s into
# ~/.cache/confidential-tee/k8s/ (minutes the first time, seconds after). The tests build it too when missing.
k8s:
	$(PYTHON) scripts/build_k8s.py

# A real node (issue 46): the kubelet of the same k8s.io/kubernetes release, containerd, the CNI plugins ptp, host-local
# and loopback, and the static guest and pause programs packed as OCI archives (no registry), built from Go modules
# into ~/.cache/confidential-tee/node/ (scripts/build_node.py; it shares Go's caches with make k8s). runc is Debian's.
node:
	$(PYTHON) scripts/build_node.py

# The real node's tests (tests/node: root, a private mount namespace and cgroup tree, nothing left behind).
node-test: collection sysdeps k8s upstream node
	$(BIN)/python -m pytest tests/node -v --durations=0 -n 0

kube-up: collection k8s upstream
	$(BIN)/python scripts/kube_control_plane.py up --scheduler --crds ../shared/reference/crds --kubevirt

molecule: collection sysdeps
	scripts/molecule.sh

# The key agent's image (Containerfile), localhost/confidential-tee/key-agent:<version>, on a Debian 12 base with
# python3 debootstrapped here (no registry); cached: nothing is built when the agent's files did not change.
image: collection sysdeps
	$(BIN)/python scripts/agent_image.py

# The VM images (Debian 12 from Debian's packages, the boot loader installed by the guest's own tools) are built
# once and cached in ~/.cache/confidential-tee/vm/ (cold: 196 s for GRUB, 170 s for systemd-boot on a quiet 2-core
# machine, mirror downloads included; vm-image builds both at once, each variant in its own directory). The first
# boot of each machine kind (Intel GRUB, systemd-boot) is kept there too, as a QEMU snapshot made by the first run.
vm-image-grub: sysdeps
	scripts/vm-image.sh

vm-image: sysdeps
	scripts/vm-image.sh & grub=$$!; scripts/vm-image.sh systemd-boot; boot=$$?; wait $$grub && exit $$boot

VM_GRUB_TESTS = tests/vm/test_tee_node_reboots_real_kernel.py tests/vm/test_failed_boot_update_keeps_the_old_line.py \
  tests/vm/test_snp_host_repairs_passthrough_real_grub.py

# Host roles on a real kernel (tests/vm, kept out of the default pytest run): one worker and one VM per file, all at
# once (each VM is one emulated CPU).
vm-test: collection vm-image
	$(BIN)/python -m pytest tests/vm -v --durations=0 -n 4 --dist loadfile

# The GRUB scenarios alone (Intel TDX: check mode, real run and reboot, facts, second run, revert; the failed boot
# updates on a second Intel VM; AMD SEV-SNP: passthrough refused and repaired through GRUB), one VM each.
vm-test-grub: collection vm-image-grub
	$(BIN)/python -m pytest $(VM_GRUB_TESTS) -v --durations=0 -n 3 --dist loadfile

# sysdeps first: Molecule needs podman, the fleet report's browser test Debian's chromium. Then two streams at once,
# one per core: the checks (lint, sanity) beside the Go builds (k8s, upstream, node), the builds one after another so
# that the packages the kubelet shares with the control plane are compiled once (cached: seconds). The live tests need
# the control plane, the upstream tests NFD's and KubeVirt's builds, tests/node make node's. Last, tests/node beside
# the VMs (all four files, docs/host-truth.md "Time"): the node's tests mostly wait on the kubelet and use about a third
# of a core, the VMs' emulated CPUs take the rest; neither shares anything else (QEMU's user network, the node's own
# cgroups, mounts and ports).
test: sysdeps collection
	$(MAKE) --no-print-directory -j2 --output-sync=recurse test-checks test-builds
	$(MAKE) --no-print-directory pytest molecule
	$(MAKE) --no-print-directory -j2 --output-sync=recurse node-test vm-test

test-checks:
	$(MAKE) --no-print-directory lint sanity

test-builds:
	$(MAKE) --no-print-directory k8s upstream node

benchmark: collection
	$(BIN)/python benchmarks/bench_modules.py
	$(BIN)/python benchmarks/profile_host_info.py
	$(BIN)/python benchmarks/bench_fleet.py
	$(BIN)/python benchmarks/bench_fleet.py --hosts 1000 --scale-hosts 100 --repeat 1 --no-mitogen --no-per-host
	$(BIN)/python benchmarks/bench_cluster.py
	$(BIN)/python benchmarks/bench_cluster_apply.py
	$(BIN)/python benchmarks/bench_simulator.py
	$(BIN)/python benchmarks/bench_sweep.py
	$(BIN)/python benchmarks/bench_grpc_latency.py

clean:
	if [ -x $(BIN)/python ]; then $(BIN)/python scripts/build_native.py --clean; fi
	rm -rf $(BUILD) tests/output .pytest_cache .ruff_cache .hypothesis
