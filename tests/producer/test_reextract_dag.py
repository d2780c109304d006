"""The drift story through the source's DAG: the markup drifts and the records lose a field, the YAML is fixed, and
a trigger with ``reextract_since`` repairs every record from the archive while the site sees no request."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
import yaml
from harvester.distributor import TaskMessage
from harvester.workers.batch import BatchRunner

from tests.fixtures.demo_site import demo_source_document
from tests.producer.test_dag_end_to_end import _dags_test, _report, airflow_home, dag_settings  # noqa: F401
from tests.workers.conftest import Crawl
from tests.workers.test_batch import run_until_idle

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

PRODUCTS = range(1, 6)


def _restyle(demo_site, query: str) -> None:
    request = urllib.request.Request(f"{demo_site.url}/_markup{query}", method="POST", data=b"")
    urllib.request.urlopen(request, timeout=5).close()


def test_a_reextraction_triggered_on_the_dag_repairs_the_drifted_records_with_no_request(
        airflow_home: Path, dag_settings, demo_site, mongo_server, redis_client, tmp_path) -> None:  # noqa: F811
    name = "reextract_dag"
    document = demo_source_document(demo_site.url, name, output={
        "key": ["url"], "history": True, "archive": {"enabled": True, "location": f"file://{tmp_path / 'warc'}"}})
    path = dag_settings.sources_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    from harvester.config import SourceConfig

    source = SourceConfig.model_validate(document)
    runner = BatchRunner(dag_settings)
    try:
        _restyle(demo_site, "?price=cost")  # the site changed its markup: the harvest's records lose their price
        try:
            crawl = Crawl(runner, redis_client)
            crawl.push(source, *[TaskMessage(source=name, kind="details", url=f"{demo_site.url}/product/{number}",
                                             run_id="drifted") for number in PRODUCTS])
            run_until_idle(crawl, source)
        finally:
            _restyle(demo_site, "")
    finally:
        runner.close()
    output = mongo_server.client()[dag_settings.mongo_database][name]
    assert output.count_documents({}) == len(PRODUCTS)
    assert all(record.get("price") is None for record in output.find())
    document["attributes"]["price"] = {"css": ".cost", "type": "float"}  # the YAML is fixed
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    requests_before = demo_site.client_stats(name)["total"]

    log_path = tmp_path / "reextract.log"
    process = _dags_test(airflow_home, f"harvest_{name}", log_path, conf={"reextract_since": "1h"})
    log_text = log_path.read_text(errors="replace")
    assert process.returncode == 0, log_text[-5000:]
    assert demo_site.client_stats(name)["total"] == requests_before  # no request reached the site
    assert all(isinstance(record["price"], float) for record in output.find()), log_text[-3000:]
    report = _report(mongo_server.client()[dag_settings.mongo_database], name)
    assert report["kind"] == "reextraction" and report["records_changed"] == len(PRODUCTS)
    history = mongo_server.client()[dag_settings.mongo_database][f"{name}_history"]
    assert history.count_documents({"run_id": report["run_id"]}) == len(PRODUCTS)
