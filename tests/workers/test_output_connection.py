"""A source whose ``output.connection_id`` names a second MongoDB server: real Celery workers write its
records there (not to HARVESTER_MONGO_URI), and the planner checks its harvesting lag there too,
while packages and runs stay on ``mongo_default``. Two database servers, the distributor process,
Celery workers and the Airflow tasks' own functions (run in a subprocess, as a task would)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from harvester.services.mongo import airflow_connection_uri
from harvester.settings import REPOSITORY_ROOT
from harvester.storage.packages import PackageStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SECOND = "mongo_second"


def run_task(step: str, source: str, tmp_path: Path, run_id: str) -> dict[str, Any]:
    """``plan``, ``produce`` or ``report`` of the source's DAG, through the Airflow adapter's functions."""
    script = textwrap.dedent(f"""
        import json
        from harvester.airflow.operators import plan_run, produce_run, report_run
        from harvester.config.loader import get_source
        source = get_source({source!r})
        if {step!r} == "plan":
            result = plan_run(source, {run_id!r}, {{}})
        else:
            result = (produce_run if {step!r} == "produce" else report_run)(source, {run_id!r})
        print(json.dumps(result, default=str))
    """)
    environment = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                            timeout=180, cwd=REPOSITORY_ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_records_land_on_the_output_connection_and_the_lag_is_checked_there(
        write_source, worker_settings, demo_site, mongo_server, second_mongo_server, celery_worker_factory,
        start_distributor, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{SECOND.upper()}", airflow_connection_uri(second_mongo_server.uri))
    urls = [f"{demo_site.url}/product/{number}" for number in (1, 2, 3)]
    source = write_source("second_output", input={"kind": "details", "seeds": urls}, listing=None,
                          harvesting_lag="6h",
                          output={"key": ["url"], "connection_id": SECOND, "database": "archive"})
    celery_worker_factory(queues="default", concurrency=2)
    start_distributor()

    plan = run_task("plan", source.name, tmp_path, "manual__first")
    assert plan["urls_planned"] == 3, plan
    run_task("produce", source.name, tmp_path, plan["run_id"])

    main = mongo_server.client()
    second = second_mongo_server.client()
    try:
        packages = main[worker_settings.mongo_database]["packages"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            package = packages.find_one({"source": source.name, "run_id": plan["run_id"]})
            if package is not None and package["status"] == PackageStatus.FINISHED:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the run did not finish: {package}")
        stored = second["archive"][source.output_collection]
        assert sorted(document["url"] for document in stored.find({}, {"url": 1})) == sorted(urls)
        assert stored.count_documents({"run_id": plan["run_id"], "sku": {"$regex": "^SKU-"}}) == 3
        assert main["archive"][source.output_collection].count_documents({}) == 0  # not the default server
        assert package["failed"] == []
        report = run_task("report", source.name, tmp_path, plan["run_id"])  # closes the run, as the DAG does
        assert report["records_stored"] == 3 and report["complete"] is True, report  # counted on the second server

        again = run_task("plan", source.name, tmp_path, "manual__second")
        assert again["urls_planned"] == 0 and again["skipped_fresh"] == 3, again  # the lag, read on the second server
    finally:
        main.close()
        second.close()
