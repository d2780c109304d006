"""The Airflow adapter in a subprocess with a scratch AIRFLOW_HOME (Airflow never loads in the test
process): MongoHook connections, the one-line error of an unreachable MongoDB, and the trigger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from harvester.services.ports import free_port
from harvester.settings import REPOSITORY_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.airflow]


def _run(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
                   "AIRFLOW__CORE__LOAD_EXAMPLES": "False", **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=environment, capture_output=True,
                          text=True, timeout=120, cwd=REPOSITORY_ROOT)


def _last_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_mongo_comes_from_the_airflow_connection_with_its_extras(tmp_path, mongo_server) -> None:
    port = mongo_server.uri.split(":")[2].split("/")[0]
    connection = json.dumps({"conn_type": "mongo", "host": "127.0.0.1", "port": int(port),
                             "extra": {"directConnection": True}})
    result = _run("""
        import json
        import harvester.airflow  # registers the Airflow resolver, as every DAG file and trigger does
        from harvester.connections import mongo_client_for, resolve_mongo
        from harvester.settings import get_settings
        target = resolve_mongo("mongo_default", get_settings())
        client = mongo_client_for(target, get_settings())
        print(json.dumps({"via": target.via, "options": target.options, "ping": client.admin.command("ping")["ok"]}))
    """, tmp_path, AIRFLOW_CONN_MONGO_DEFAULT=connection, HARVESTER_MONGO_URI="mongodb://127.0.0.1:1/")
    answer = _last_json(result)
    assert answer == {"via": "Airflow connection mongo_default", "options": {"directConnection": True}, "ping": 1.0}


def test_without_a_connection_it_falls_back_to_harvester_mongo_uri(tmp_path, mongo_server) -> None:
    result = _run("""
        import json
        import harvester.airflow
        from harvester.connections import resolve_mongo
        from harvester.settings import get_settings
        print(json.dumps(resolve_mongo("source_own_connection", get_settings()).via))
    """, tmp_path, HARVESTER_MONGO_URI=mongo_server.uri)
    assert _last_json(result) == "HARVESTER_MONGO_URI"


def test_unreachable_mongodb_fails_plan_with_one_clear_line(tmp_path) -> None:
    closed = free_port()
    result = _run("""
        from harvester.config.model import SourceConfig
        from harvester.airflow.operators import plan_run
        source = SourceConfig.model_validate({"name": "shop", "attributes": {"t": "h1"},
                                              "input": {"kind": "details", "seeds": ["http://a.example/1"]}})
        plan_run(source, "manual__1", {})
    """, tmp_path, HARVESTER_MONGO_URI=f"mongodb://user:secret@127.0.0.1:{closed}/",
                  HARVESTER_PRODUCER_MONGO_TIMEOUT_MS="300")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("harvester.errors.MongoUnavailableError: MongoDB unreachable at "), last
    assert f"127.0.0.1:{closed}" in last and "secret" not in last and "(HARVESTER_MONGO_URI)" in last
    assert "Traceback" in result.stderr and "During handling" not in result.stderr  # no chained pymongo dump


def test_trigger_serialises_and_fires_when_every_package_is_finished(tmp_path, harvester_settings) -> None:
    result = _run("""
        import asyncio, json, time
        from harvester.storage.packages import PackageStore
        from harvester.airflow.triggers import HarvestProgressTrigger
        from harvester.settings import get_settings
        settings = get_settings()
        from harvester.connections import mongo_client
        store = PackageStore(mongo_client("mongo_default", settings=settings)[settings.mongo_database])
        store.ensure_indexes()
        store.create_packages("shop", "run1", [(0, ["http://a.example/1"])])
        trigger = HarvestProgressTrigger(
            source="shop", run_id="run1", output_collection="shop", database=settings.mongo_database,
            output_database=settings.mongo_database, poll_seconds=0.2, deadline=time.time() + 30)
        classpath, kwargs = trigger.serialize()
        assert not any("://" in str(value) for value in kwargs.values()), kwargs  # ids, never URIs
        assert classpath == "harvester.airflow.triggers.HarvestProgressTrigger"
        rebuilt = HarvestProgressTrigger(**kwargs)

        async def main():
            async def finish_later():
                await asyncio.sleep(1.0)
                [package] = await asyncio.to_thread(store.claim, "shop", "run1", 1)
                await asyncio.to_thread(store.complete_tasks, "shop", "run1", 0, package["pending"])
            finisher = asyncio.create_task(finish_later())
            started = time.monotonic()
            event = await anext(rebuilt.run())
            await finisher
            return event.payload, time.monotonic() - started

        payload, waited = asyncio.run(main())
        timeout_trigger = HarvestProgressTrigger(**{**kwargs, "run_id": "never-finishes", "deadline": 0})
        store.create_packages("shop", "never-finishes", [(0, ["http://a.example/2"])])
        late = asyncio.run(anext(timeout_trigger.run())).payload
        print(json.dumps({"status": payload["status"], "done": payload["progress"]["packages_finished"],
                          "waited": waited, "late": late["status"]}))
    """, tmp_path)
    answer = _last_json(result)
    assert answer["status"] == "complete" and answer["done"] == 1 and answer["waited"] >= 0.9
    assert answer["late"] == "timeout"
    assert "packages 0/1 done" in result.stdout + result.stderr  # progress logged while waiting


def test_dag_shape_asset_and_sensor_timeout(tmp_path) -> None:
    result = _run("""
        import json
        from airflow.sdk import DAG
        from airflow.sdk.exceptions import AirflowSensorTimeout
        from harvester.config.model import SourceConfig
        from harvester.airflow.operators import HarvestSensor, add_producer_tasks, output_asset
        from harvester.settings import get_settings
        source = SourceConfig.model_validate({"name": "shop", "attributes": {"t": "h1"},
                                              "input": {"kind": "details", "seeds": ["http://a.example/1"]},
                                              "output": {"collection": "products"}})
        with DAG(dag_id="harvest_shop", schedule=None) as dag:
            add_producer_tasks(source)
        edges = {task.task_id: sorted(task.downstream_task_ids) for task in dag.tasks}
        sensor = dag.get_task("wait_for_harvest")
        try:
            sensor.execute_complete({}, {"status": "timeout", "progress": {"run_id": "r", "packages_finished": 1,
                                                                           "packages_total": 3}})
            timed_out = None
        except AirflowSensorTimeout as error:
            timed_out = str(error)
        print(json.dumps({"edges": edges, "outlets": [o.uri for o in dag.get_task("report").outlets],
                          "asset": output_asset(source, get_settings()).uri, "deferrable": sensor.deferrable,
                          "timed_out": timed_out}))
    """, tmp_path, HARVESTER_MONGO_DATABASE="harvest_db")
    answer = _last_json(result)
    assert answer["edges"] == {"plan": ["produce"], "produce": ["wait_for_harvest"],
                               "wait_for_harvest": ["report"], "report": []}
    assert answer["outlets"] == [answer["asset"]] == ["harvester://harvest_db/products"]
    assert answer["deferrable"] is True
    assert "did not finish" in answer["timed_out"] and "1/3 packages" in answer["timed_out"]
