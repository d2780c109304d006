"""The run's progress shows in the sensor's task log while it runs, read through the Airflow REST API
of a real `airflow standalone` (scheduler, dag-processor, triggerer, api-server, LocalExecutor)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source_document
from tests.observability.airflow_server import standalone_airflow_and_distributor, trigger_run

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]
PROGRESS = re.compile(r"packages (\d+)/(\d+) done")
RATE = re.compile(r"[\d.]+ pages/min(, ETA \w+)?")


@pytest.fixture
def standalone_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    # 4 pages per 4-second window: the 12 pages take ~10 s, long enough to watch.
    return configure_settings(producer_poll_seconds=1, producer_wait_timeout_seconds=300, lease_seconds=20,
                              heartbeat_seconds=2, rate_window_seconds=4)


def _get(client: httpx.Client, path: str, **params: Any) -> Any:
    response = client.get(path, params=params)
    response.raise_for_status()
    return response.json()


def test_sensor_log_shows_progress_through_the_rest_api(
        standalone_settings, demo_site, mongo_server, celery_worker_factory, tmp_path) -> None:
    name = "e2e_progress"
    document = demo_source_document(demo_site.url, name, batch={"size": 3, "max_packages": 100},
                                    harvesting_lag=0, rate_limit={"max_active": 2, "per_minute": 4},
                                    schedule=None)
    document["input"] = {"kind": "details", "seeds": [f"{demo_site.url}/product/{i}" for i in range(1, 13)]}
    document.pop("listing")
    (standalone_settings.sources_dir / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    celery_worker_factory(queues="default,priority", concurrency=2)

    with (standalone_airflow_and_distributor(tmp_path) as base_url,
          httpx.Client(base_url=f"{base_url}/api/v2", timeout=30) as client):
        dag_id = f"harvest_{name}"
        deadline = time.monotonic() + 180
        while client.get(f"/dags/{dag_id}").status_code != 200:
            assert time.monotonic() < deadline, "the DAG was never parsed: " + _tail(tmp_path)
            time.sleep(1)
        run_id = trigger_run(client, f"/dags/{dag_id}/dagRuns")

        seen: list[tuple[int, int]] = []
        deferred_seen = False
        rates: set[str] = set()
        states: list[str] = []
        deadline = time.monotonic() + 240
        while True:
            assert time.monotonic() < deadline, f"run did not finish; progress seen {seen}: " + _tail(tmp_path)
            run = _get(client, f"/dags/{dag_id}/dagRuns/{run_id}")
            sensor = client.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/wait_for_harvest")
            if sensor.status_code == 200 and sensor.json().get("state") in ("deferred", "running", "success"):
                instance = sensor.json()
                if not states or states[-1] != instance["state"]:
                    states.append(instance["state"])
                deferred_seen = deferred_seen or instance["state"] == "deferred"
                logs = client.get(
                    f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/wait_for_harvest/logs/"
                    f"{max(1, instance.get('try_number') or 1)}",
                    params={"full_content": "true"}, headers={"Accept": "application/json"})
                if logs.status_code == 200:
                    text = json.dumps(logs.json())
                    rates.update(match.group(0) for match in RATE.finditer(text))
                    for done, total in PROGRESS.findall(text):
                        if (int(done), int(total)) not in seen:
                            seen.append((int(done), int(total)))
            if run["state"] in ("success", "failed"):
                break
            time.sleep(1)
        assert run["state"] == "success", _tail(tmp_path)
        assert deferred_seen, f"the sensor never deferred to the triggerer: states {states}, progress {seen}"
        # Progress lines appeared while the run was in flight, and the last one shows it complete.
        assert any(done < total for done, total in seen), seen
        assert (4, 4) in seen, seen
        assert any("ETA" in rate for rate in rates), rates  # the progress line has a rate and an ETA
        report = _get(client, f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/report/xcomEntries/return_value")
        value = report["value"]
        value = json.loads(value) if isinstance(value, str) else value
        assert value["records_stored"] == 12 and value["complete"], value
        events = _get(client, "/assets/events", source_dag_id=dag_id)
        assert events["total_entries"] >= 1


def _tail(tmp_path: Path) -> str:
    log = tmp_path / "standalone.log"
    return log.read_text(errors="replace")[-4000:] if log.exists() else ""
