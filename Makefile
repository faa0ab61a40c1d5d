# Two commands: `make demo` (set-up + the service end to end on the local stack) and
# `make test` (set-up + the whole suite). Both are idempotent; set-up is skipped when done.
VENV := .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/cdc-enrich
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
# The project's own modules and the tests keep their compiled form in __pycache__ (git-ignored)
# even where the environment sets PYTHONDONTWRITEBYTECODE, as this machine's does: every pytest
# worker, job process and Spark Python worker would compile them again (collecting the suite:
# 11.8 s -> 7.5 s per process; set-up compiles the venv's packages, tools/setup.sh).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup demo test test-unit test-integration test-e2e test-connect test-slow test-postgres bench stack-up stack-down clean

setup:
	@bash tools/setup.sh

# `make demo POSTGRES=1`: the same with a real PostgreSQL and Debezium's connector; `V=1`: every detail (-v).
demo: setup
	@$(CLI) $(if $(V),-v) demo $(if $(POSTGRES),--with-postgres)

# The whole default suite (every tier; the long randomized runs are `make test-slow`) on two
# pytest workers, one per core (a third made every run slower: docs/performance.md, "The test suite"),
# with the slowest tests listed so that CI shows where the time goes; a module marked
# `xdist_group` runs on one worker (its module fixtures are built once).
test: setup
	@$(PY) -m pytest -q -n 2 --dist loadgroup --durations=25 tests

test-unit: setup
	@$(PY) -m pytest -q tests/unit

test-integration: setup
	@$(PY) -m pytest -q tests/integration

test-e2e: setup
	@$(PY) -m pytest -q tests/e2e

test-connect: setup
	@$(PY) -m pytest -q tests/connect

test-slow: setup
	@$(PY) -m pytest -q -m "slow" tests

test-postgres: setup
	@$(PY) -m pytest -q -m "slow or not slow" tests/e2e/test_postgres_e2e.py

bench: setup
	@$(CLI) bench all

stack-up: setup
	@$(CLI) stack up

stack-down: setup
	@$(CLI) stack down

clean:
	-@$(CLI) stack down 2>/dev/null
	rm -rf .lake spark-warehouse metastore_db
