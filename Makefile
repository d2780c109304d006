# Harvester: `make run` starts everything locally on loopback; `make test` runs the whole suite.
SHELL := /bin/bash
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: bootstrap run stop status test test-unit lint schema validate clean

bootstrap:
	@bash scripts/bootstrap.sh

run: bootstrap
	@$(PY) -m harvester.services.stack run

stop:
	@if [ -x $(PY) ]; then $(PY) -m harvester.services.stack stop; else echo "nothing to stop"; fi

status:
	@$(PY) -m harvester.services.stack status

test: bootstrap
	@$(PY) -m pytest $(PYTEST_ARGS)

test-unit: bootstrap
	@$(PY) -m pytest -m unit $(PYTEST_ARGS)

lint: bootstrap
	@.venv/bin/ruff check include dags plugins tests bench

schema: bootstrap
	@.venv/bin/harvester schema

validate: bootstrap
	@.venv/bin/harvester validate

clean: stop
	rm -rf var
