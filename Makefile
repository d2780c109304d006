# Harvester: `make run` starts everything locally on loopback; `make test` runs the whole suite.
# `make run MODE=cluster` starts the production topology of docker-compose.yaml instead (PostgreSQL,
# Airflow's CeleryExecutor, separate worker machines), still on loopback; `make stop` stops either.
SHELL := /bin/bash
PY := .venv/bin/python
PYTEST_ARGS ?=
# `make test` runs the suite on PYTEST_WORKERS pytest-xdist workers (each starts servers of its own on free
# ports; tests sharing a module-scoped fixture stay on one worker, see tests/conftest.py). Most tests wait on
# servers, so twice the cores keeps both cores busy. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
PYTEST_PARALLEL = $(if $(filter 0,$(PYTEST_WORKERS)),-p no:xdist,-n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder)
MODE ?= embedded

.PHONY: bootstrap run stop status test test-unit lint schema validate clean

bootstrap:
	@bash scripts/bootstrap.sh

run: bootstrap
	@if [ "$(MODE)" = cluster ]; then $(PY) -m harvester.services.cluster run; \
	else $(PY) -m harvester.services.stack run; fi

stop:
	@if [ ! -x $(PY) ]; then echo "nothing to stop"; exit 0; fi; \
	if [ "$(MODE)" != cluster ]; then $(PY) -m harvester.services.stack stop; fi; \
	if [ -d var/cluster/run ]; then $(PY) -m harvester.services.cluster stop; fi

status:
	@if [ "$(MODE)" = cluster ]; then $(PY) -m harvester.services.cluster status; \
	else $(PY) -m harvester.services.stack status; fi

test: bootstrap
	@$(PY) -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-unit: bootstrap
	@$(PY) -m pytest -m unit $(PYTEST_ARGS)

lint: bootstrap
	@.venv/bin/ruff check include demo dags plugins tests bench

schema: bootstrap
	@.venv/bin/harvester schema

validate: bootstrap
	@.venv/bin/harvester validate

clean: stop
	rm -rf var
