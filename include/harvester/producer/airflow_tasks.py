"""Airflow adapter of the producer: the tasks of a source's DAG.

PLACEHOLDER written by the config layer so its DAG factory has tasks to build; the producer
component replaces this file with plan -> produce -> wait_for_harvest -> report.
"""

from __future__ import annotations

import logging

from airflow.sdk import task

from harvester.config.model import SourceConfig

log = logging.getLogger(__name__)


def add_producer_tasks(source: SourceConfig) -> None:
    """Add the producer's tasks to the DAG being declared (call inside its ``with DAG(...)``)."""
    name = source.name

    @task(task_id="plan")
    def plan(params: dict | None = None) -> dict:
        from harvester.config.loader import get_source
        from harvester.config.run_options import RunOptions

        options = RunOptions.for_run(get_source(name), params)
        log.info("plan for %s: %s", name, options.model_dump())
        return options.model_dump()

    plan()
