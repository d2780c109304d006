"""A source with ``schedule: {after: [upstream]}`` runs after its upstream's run, scheduled by a
real `airflow standalone` on the upstream's output Asset, whose event carries the run's figures."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import yaml
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source_document
from tests.observability.airflow_server import standalone_airflow_and_distributor, trigger_run

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]


@pytest.fixture
def standalone_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    return configure_settings(producer_poll_seconds=1, producer_wait_timeout_seconds=300, lease_seconds=20,
                              heartbeat_seconds=2)


def write_details_source(settings: HarvesterSettings, site: str, name: str, ids: range, **fields: Any) -> None:
    document = demo_source_document(site, name, harvesting_lag=0, **fields)
    document["input"] = {"kind": "details", "seeds": [f"{site}/product/{i}" for i in ids]}
    document.pop("listing")
    (settings.sources_dir / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def poll(client: httpx.Client, path: str, deadline: float) -> Any:
    """One poll of the API; a reply slower than the client's timeout (a loaded machine) is asked again,
    until the caller's deadline."""
    while True:
        try:
            return client.get(path).json()
        except httpx.TimeoutException:
            if time.monotonic() > deadline:
                raise


def test_a_source_scheduled_after_another_runs_after_its_run(
        standalone_settings, demo_site, mongo_server, celery_worker_factory, tmp_path) -> None:
    write_details_source(standalone_settings, demo_site.url, "asset_up", range(1, 4), schedule=None,
                         output={"collection": "asset_up_records", "key": ["url"]})
    write_details_source(standalone_settings, demo_site.url, "asset_down", range(4, 6),
                         schedule={"after": ["asset_up"]})
    celery_worker_factory(queues="default,priority", concurrency=2)
    def tail() -> str:
        log = tmp_path / "standalone.log"
        return log.read_text(errors="replace")[-4000:] if log.exists() else ""

    with (standalone_airflow_and_distributor(tmp_path) as base_url,
          httpx.Client(base_url=f"{base_url}/api/v2", timeout=30) as client):
        deadline = time.monotonic() + 180
        while any(client.get(f"/dags/harvest_{name}").status_code != 200 for name in ("asset_up", "asset_down")):
            assert time.monotonic() < deadline, "the DAGs were never parsed: " + tail()
            time.sleep(1)
        down = client.get("/dags/harvest_asset_down/details").json()
        assert "asset" in json.dumps(down.get("timetable_summary") or down.get("timetable_description") or
                                     down).lower(), down
        assert client.get("/dags/harvest_asset_down/dagRuns").json()["total_entries"] == 0

        upstream_run = trigger_run(client, "/dags/harvest_asset_up/dagRuns")
        deadline = time.monotonic() + 240
        while (run := poll(client, f"/dags/harvest_asset_up/dagRuns/{upstream_run}", deadline))["state"] not in (
                "success", "failed"):
            assert time.monotonic() < deadline, "the upstream run did not finish: " + tail()
            time.sleep(1)
        assert run["state"] == "success", tail()

        deadline = time.monotonic() + 180
        while True:
            runs = poll(client, "/dags/harvest_asset_down/dagRuns", deadline)["dag_runs"]
            finished = [item for item in runs if item["state"] in ("success", "failed")]
            if finished:
                break
            assert time.monotonic() < deadline, f"the downstream never ran after the upstream: {runs} " + tail()
            time.sleep(1)
        # the events route answers 500 while an event's dag run has not started yet (Airflow 3.3.2 validates
        # its start_date as a datetime), so the events are read once the downstream run is done
        answer = client.get("/assets/events", params={"source_dag_id": "harvest_asset_up"})
        assert answer.status_code == 200, f"{answer.status_code} {answer.text[:2000]} " + tail()
        events = answer.json()
        assert events["total_entries"] == 1, events
        event = events["asset_events"][0]
        assert event["uri"] == f"harvester://{standalone_settings.mongo_database}/asset_up_records", event
        extra = event["extra"]
        assert extra["source"] == "asset_up" and extra["records_stored"] == 3 and extra["records_new"] == 3
        assert extra["records_changed"] == 0 and extra["records_not_modified"] == 0 and extra["rejected"] == 0

        downstream = finished[0]
        assert downstream["state"] == "success", tail()
        assert downstream["run_type"] == "asset_triggered", downstream
        # started by the upstream's event: after it was emitted (the upstream run itself is marked done
        # a moment later, by the scheduler), and naming it as its trigger
        assert downstream["start_date"] >= event["timestamp"]
        triggers = client.get(f"/dags/harvest_asset_down/dagRuns/{downstream['dag_run_id']}"
                              "/upstreamAssetEvents").json()
        assert [item["id"] for item in triggers["asset_events"]] == [event["id"]], triggers
