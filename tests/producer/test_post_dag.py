"""A source behind POST harvested by a real producer DAG (`airflow dags test`) with the distributor, Celery
workers, MongoDB and the demo's GraphQL endpoint: every item stored, one POST a page, never a GET."""

from __future__ import annotations

import pytest
import yaml
from harvester.settings import REPOSITORY_ROOT

from tests.producer.test_dag_end_to_end import (  # noqa: F401  (fixtures: Airflow's home, settings, distributor)
    _dags_test,
    _report,
    _write_source,
    airflow_home,
    dag_settings,
    distributor,
)

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]


def test_a_graphql_source_run_by_its_dag_stores_every_item_with_one_post_a_page(
        airflow_home, dag_settings, demo_site, mongo_server, celery_worker_factory, distributor,  # noqa: F811
        tmp_path) -> None:
    document = yaml.safe_load((REPOSITORY_ROOT / "include" / "sources" / "demo_graphql.yaml").read_text())
    name = "e2e_dag_graphql"
    document.update(name=name, harvesting_lag=0, rate_limit={"max_active": 4, "per_minute": 100_000},
                    output={"collection": name})
    for request in document["input"]["requests"]:  # two segments of the items: two cursor chains
        request["url"] = f"{demo_site.url}/graphql"
    _write_source(dag_settings, document)
    celery_worker_factory(queues="default,priority", concurrency=2)
    log_path = tmp_path / "dags-test.log"
    _dags_test(airflow_home, f"harvest_{name}", log_path)
    report = _report(mongo_server.client()[dag_settings.mongo_database], name)
    assert report["complete"], log_path.read_text(errors="replace")[-5000:]
    assert report["records_stored"] == 500 and report["records_new"] == 500, report
    output = mongo_server.client()[dag_settings.mongo_database][name]
    assert len(output.distinct("sku")) == 500
    assert demo_site.api_requests() == {"POST /graphql": 10}  # 250 items a segment: 5 pages each
