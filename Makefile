# san-jobs tasks. `make help` lists them. Everything installs into .venv/ and
# node_modules/ inside the checkout: nothing global but what apt provides.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUF := node_modules/.bin/buf
STAMP := $(VENV)/.installed
# Parallel test processes for `make test`: the tests mostly wait on processes and
# sockets, so more processes than cores pay off.
TEST_WORKERS ?= 4

.DEFAULT_GOAL := help
.PHONY: help install proto proto-baseline lint buf-lint buf-breaking test test-fast bench run clean browser certs dist sql

help: ## List the tasks
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml package.json scripts/dev_constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -c scripts/dev_constraints.txt
	npm install --no-audit --no-fund --loglevel=error
	@touch $(STAMP)

install: $(STAMP) ## Create .venv with the project and dev tools, and the buf CLI (npm)

proto: $(STAMP) ## Regenerate all Python code in san_jobs/proto/ from proto/
	$(PY) scripts/gen_proto.py

sql: $(STAMP) ## Write the SQL of the hot statements, per dialect, into san_jobs/job_service/storage/sql/
	$(PY) scripts/dump_sql.py

proto-baseline: $(STAMP) ## Record the current contract as the released baseline for buf breaking
	$(BUF) build -o contract/baseline.binpb

buf-lint: $(STAMP)
	$(BUF) lint

buf-breaking: $(STAMP)
	$(BUF) breaking --against contract/baseline.binpb

RUFF_CHECKS := $(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
MYPY := $(VENV)/bin/mypy

lint: $(STAMP) buf-lint buf-breaking ## ruff, mypy --strict and buf on everything hand-written
	$(RUFF_CHECKS)
	$(MYPY)

browser: ## Install Debian's Chromium for the page tests (needs root)
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing Debian's chromium and chromium-driver for the page tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

# The suite starts about 600 Python processes (services, jobsctl, scripts) and each test
# process imports 400 test modules. Where the environment sets PYTHONDONTWRITEBYTECODE
# (this project's CI machines do), every one of them compiled the project again and
# every test process rewrote every test module's asserts again (tests/acceptance/
# job_service took 10-15 % more CPU and time that way). The tests write bytecode (into
# the ignored __pycache__ directories); one collection first writes the test modules'
# rewritten bytecode, once, for all.
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE

# mypy (one core, about 20 s from a fresh clone) and that collection (the other core)
# run side by side: the recipe line fails with mypy's status once both have ended, so
# a lint failure still stops `make test` before any test runs. The lint steps are
# `make lint`'s own, written once above.
test: $(STAMP) browser buf-lint buf-breaking ## make lint, then every test (PostgreSQL tests need 127.0.0.1:5432; required under CI=true)
	$(RUFF_CHECKS)
	$(TEST_ENV) $(VENV)/bin/pytest --collect-only -q -p no:cacheprovider > /dev/null 2>&1 & $(MYPY); status=$$?; wait; exit $$status
	$(TEST_ENV) $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist worksteal --durations=25

test-fast: $(STAMP) ## Unit tests only
	$(VENV)/bin/pytest tests/unit

bench: $(STAMP) ## Print the performance figures (bench/)
	$(PY) bench/run_all.py

run: $(STAMP) ## Run AiGateway, JobService (SQLite, built-in AI backend) and san-web; Ctrl-C stops all
	$(PY) scripts/run.py

certs: $(STAMP) ## Write a development CA and TLS certificates for every part into var/certs/ (--force: FORCE=1)
	$(PY) scripts/dev_certs.py $(if $(FORCE),--force)

dist: $(STAMP) ## Build the wheel into dist/ (`pip install dist/*.whl` is the SDK; extras add the programs)
	rm -rf dist
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .
	@ls dist/*.whl

clean: ## Remove build and test leftovers (keeps .venv and var/)
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
