# Targets are what CI runs. Python comes from .python-version (3.13) through pyenv.
SHELL := /bin/bash
PYTHON ?= python3.13
VENV := .venv
SAM_VENV := .venv-sam
PY := $(VENV)/bin/python
SAM := $(SAM_VENV)/bin/sam
CHECKOV_VENV := .venv-checkov
export SAM_CLI_TELEMETRY := 0
# This machine's environment sets PYTHONDONTWRITEBYTECODE=1 (CI's, a machine of its kind, may
# too), and uv installs no bytecode: every Python process compiled every module it imported from
# source, and pytest re-rewrote every test module's asserts in each worker. A test run starts
# hundreds of processes importing the same modules (workers, twins, their forwarders, CLI
# calls), so its processes write their bytecode (into the venvs and the clone's __pycache__
# folders, which git ignores): the first process to import a module compiles it for the rest.
# A twin's start 3.7 CPU-s less in its own process, collecting the e2e and integration tiers
# 18.7 CPU-s → 10.1, tests/e2e/test_cli.py 12 % (BENCHMARKS.md, "Bytecode written", D201).
# The layer the twin's Lambda workers import ships its bytecode, as `sam build` makes it.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help install sam-install components demo test test-solo gates test-fast test-unit \
        test-integration test-e2e lint typecheck validate check-asl lock build bench \
        bench-scenarios clean browser

help:
	@echo "make demo   - start the local twin and run the demo scenario"
	@echo "make test   - every quality gate: lint, types, template, ASL, unit, integration, e2e"
	@echo "make test-fast - unit and integration tests only, for the inner loop"
	@echo "make build  - sam build (arm64 wheels, no Docker)"
	@echo "make bench  - run the benchmarks (JSON on stdout)"
	@echo "make bench-scenarios - the measured twin scenarios at full size (JSON lines)"

# One lock of versions (requirements/dev.lock) for the tests, the twin and the layer: the
# layer's shared/requirements.txt is the runtime part of it (`make lock` writes both).
# The product (shared/) and the twin (twin/, a distribution of its own) are both installed
# editable: the twin's `hyperguard twin` commands reach the CLI through its entry point.
# uv installs, at the lock's version (pip only installs uv): the same packages as pip in
# 5 s instead of 33, and the gates' two venvs in 3 s each instead of 24 and 15 (BENCHMARKS.md,
# "CI wall time", 2026-11-30). It takes the system's certificates, as pip does here.
UV := $(VENV)/bin/uv
UV_PIN := $(shell grep -m1 '^uv==' requirements/dev.lock)
export UV_NATIVE_TLS := 1
$(VENV)/.installed: pyproject.toml twin/pyproject.toml trainer/pyproject.toml requirements/dev.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(UV_PIN)
	$(UV) pip install --quiet --python $(PY) --upgrade pip
	$(UV) pip install --quiet --python $(PY) -r requirements/dev.lock
	$(UV) pip install --quiet --python $(PY) --no-deps -e . -e twin -e trainer
	touch $@

install: $(VENV)/.installed

# aws-sam-cli pins older boto3/pydantic than the project: it lives in its own venv.
$(SAM_VENV)/.installed: $(VENV)/.installed
	$(PYTHON) -m venv $(SAM_VENV)
	$(UV) pip install --quiet --python $(SAM_VENV)/bin/python 'aws-sam-cli>=1.130'
	touch $@

sam-install: $(SAM_VENV)/.installed

# checkov pins its own boto3/networkx stack: it too lives in its own venv.
$(CHECKOV_VENV)/.installed: $(VENV)/.installed
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(UV) pip install --quiet --python $(CHECKOV_VENV)/bin/python 'checkov>=3.2,<4'
	touch $@

# Headless Chromium renders the twin's HTML report in the integration tier. CI runs as root
# on Debian, on a machine without it, and installs it beside the first test run: without
# Debian's recommended packages (avahi, cups, upower, fonts: none used headless), 19 packages
# instead of 107, 14 CPU-s instead of 25 (BENCHMARKS.md, "An idle twin's cost"). Elsewhere
# install it yourself.
browser:
	@command -v chromium >/dev/null || { \
	    command -v apt-get >/dev/null || { \
	        echo "make browser: chromium is not installed and there is no apt-get:" \
	             "install Chromium with your package manager" >&2; exit 1; }; \
	    apt-get update && apt-get install -y --no-install-recommends chromium; }

# The upstream Kubernetes the twin runs (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, KWOK, Kueue, Karpenter: D126), built from the Go modules pinned in
# twin/components into a cache outside the repo (~/.cache/hyperguard/components, or
# $HYPERGUARD_COMPONENTS_CACHE), rebuilt only when a pin or the Go toolchain changes. The first
# build takes minutes (progress on stderr); later ones find the cache in seconds.
components: install
	$(PY) -m hyperguard_twin.plane.components $(CURDIR)

demo: install components
	$(VENV)/bin/hyperguard twin demo

lint: install
	$(VENV)/bin/ruff check shared twin trainer examples functions tests bench
	$(VENV)/bin/ruff format --check shared twin trainer examples functions tests bench
	$(PY) -m hyperguard.tools.complexity

typecheck: install
	$(VENV)/bin/mypy

# Security gates too: cfn-lint with informational rules, and checkov. Every suppression
# sits in template.yaml beside the resource, with its reason (docs/security.md).
validate: install sam-install $(CHECKOV_VENV)/.installed
	$(VENV)/bin/cfn-lint template.yaml -c I
	$(SAM) validate --lint --region us-east-1
	$(CHECKOV_VENV)/bin/checkov --quiet --compact --skip-download --framework cloudformation \
	    --file template.yaml

check-asl: install
	$(PY) -m pytest -q tests/unit/test_asl.py tests/unit/test_template.py

# Parallel workers (pytest-xdist). A module whose tests share a fixture wider than a test (an
# e2e module's twin) goes to one worker whole; every other test to whichever worker is free
# (tests/conftest.py, --dist loadgroup). Every worker has its own ports, emulator and twin.
# The 20 slowest tests are listed at the end of every run. A worker that dies (a signal
# that ended its process) fails the run at once: xdist 3.8's replacement of a crashed worker
# under --dist loadgroup can leave every worker waiting for work that is never sent (a run
# 2026-11-30 hung so for 13 minutes, idle, until interrupted; tests/unit/test_xdist_groups.py).
PYTEST := $(PY) -m pytest -q --dist loadgroup --durations=20 --max-worker-restart=0
# A twin test runs the upstream control plane beside the functions (kube-apiserver, etcd,
# the controllers, Kueue, Karpenter, KWOK: about a fifth of a core idle, with its
# functions). One twin more than the cores: with one a core the second run used 58-69 % of
# the two cores (it mostly waits for the simulated clock) and took 22-24 minutes; with
# three 18 min 42 s at 77 % (BENCHMARKS.md, "CI wall time", 2026-11-27). Four twins on CI's
# 2 cores starved their controllers, and scenarios that wait on them in wall time ran out of
# their simulated time limits. The second run has a worker more than twins
# (tests/xdist_twins.py, --twins-at-once): it runs the tests without a twin while the twins
# wait for their clocks, and the cores stay busy (16 min 37 s → 13 min 27 s, BENCHMARKS.md,
# 2026-11-30, "A worker more than twins").
TWIN_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
RUN2_WORKERS ?= $(shell echo $$(( $(TWIN_WORKERS) + 1 )))

test-unit: install
	$(PYTEST) -n auto tests/unit

test-integration: install components
	$(PYTEST) -n auto tests/integration

test-e2e: install components
	$(PYTEST) -n $(TWIN_WORKERS) tests/e2e

# The inner loop: unit and integration tiers, no twin (CONTRIBUTING.md).
test-fast: install components
	$(PYTEST) -n auto tests/unit tests/integration

# Two runs. First the unit tier beside the fault-injection module, which must not share
# the cores with other twins: beside three of them (one run, 4 workers) 7 of its 64-node
# storm's reports had opened no incident after 300 s. Its tests share module-scoped twins,
# so they run one after another on one worker (about 4 minutes); the unit tier takes the
# other worker for about a minute and a quarter, and FILL, three integration modules of long
# property tests without a twin, takes the rest of it. The gates (lint,
# types, the template's validators and the venvs they install) run beside that first run
# in make's second job slot: its twins mostly wait for the simulated clock, and the gates
# took 75 s of wall time alone. Then the rest of the integration tier and of the e2e tier.
# Coverage of the library is measured over both runs and may not fall below pyproject.toml's
# floor. Each job's output is printed whole when it ends.
SOLO := tests/e2e/test_faults.py
# Run 2 hands out its work in the order pytest collects it, unit by unit
# (--no-loadscope-reorder: xdist otherwise puts the groups with most tests first): the units
# of over a minute first, longest first (tests/xdist_twins.py, LONGEST_FIRST), then the rest
# in the folders' order.
FILL := tests/integration/test_job_lifecycle.py tests/integration/test_api_limits.py \
        tests/integration/test_quota_limits_property.py
test: install components
	$(MAKE) --no-print-directory -j2 -Otarget test-solo gates
	$(PYTEST) -n $(RUN2_WORKERS) --twins-at-once $(TWIN_WORKERS) --no-loadscope-reorder \
	    --cov --cov-append --cov-report= \
	    tests/e2e tests/integration --ignore=$(SOLO) $(addprefix --ignore=,$(FILL))

test-solo: install components
	$(PYTEST) -n auto --cov --cov-report= --cov-fail-under=0 tests/unit $(SOLO) $(FILL)

gates: lint typecheck validate browser

# requirements/dev.lock pins every package of pyproject.toml's dependencies and extras;
# shared/requirements.txt, what `sam build` installs into the layer, is its runtime part
# (unit tests fail if either disagrees with pyproject.toml). Run after changing a dependency.
lock: install
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --universal --python-version 3.13 \
	    --quiet --no-header -o requirements/dev.lock
	$(PY) -m hyperguard.tools.layer_requirements > shared/requirements.txt

# The layer's recipe (shared/Makefile) runs pip with the project's Python.
build: install sam-install
	PYTHON=$(abspath $(PY)) $(SAM) build --parallel

# The scheduler bench starts its own kube-apiserver and etcd (D134) and the recovery bench a
# twin: both need the components. The scheduler's default shape took 3 minutes here under
# other work (BENCHMARKS.md, 2026-11-25); Kueue's full baseline shape (bench/scheduler.py
# --shape baseline) took about 10 minutes before the port: by hand.
bench: install components
	$(PY) bench/ingest.py
	$(PY) bench/scheduler.py
	$(PY) bench/scheduler.py --growth 1000,10000,50000
	$(PY) bench/lambda_init.py
	$(PY) bench/recovery.py

# The measured scenarios at full size, each on fresh twins (about 30 minutes in all; CI runs
# them at smoke size in the e2e tier). One JSON object per line on stdout.
bench-scenarios: install
	$(VENV)/bin/hyperguard twin scenario day-in-the-life --json | tr -d '\n'; echo
	$(VENV)/bin/hyperguard twin scenario elastic-fault --json | tr -d '\n'; echo
	$(VENV)/bin/hyperguard twin scenario proactive-move --json | tr -d '\n'; echo
	$(VENV)/bin/hyperguard twin gameday --json | tr -d '\n'; echo

clean:
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) .aws-sam .pytest_cache .mypy_cache .ruff_cache
