"""The production topology of docker-compose.yaml, without Docker, with the commands compose runs.

PostgreSQL, Redis with a password, the tests' MongoDB, Airflow with the CeleryExecutor as separate
processes (api-server, scheduler, dag-processor, triggerer, `airflow celery worker`), the distributor,
and Harvester worker machines with node names of their own (harvester.services.cluster, which
`make run MODE=cluster` also uses). A demo harvest runs end to end through the REST API; then a worker
machine is SIGKILLed and the next run is served by the machine that remains. A browser harvest is rendered by
a page slot on the slot host, opened by the `page_slots` DAG, through the SG forward proxy.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from harvester.services import readiness
from harvester.services.cluster import CELERY_APP, Cluster, ClusterPorts, WorkerMachine
from harvester.settings import REPOSITORY_ROOT

from tests.fixtures.forward_proxy import ForwardProxyServer, start_forward_proxy

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]

DEMO_PRODUCTS = 40  # max_new_urls of the test's demo_shop: enough batches for both machines, quick on 2 cores
MACHINE_A = WorkerMachine("machine-a", "http")
MACHINE_B = WorkerMachine("machine-b", "http")
PAGESLOTS_MACHINE = WorkerMachine("machine-c", "pageslots", concurrency=1)


def unscheduled_source(name: str, **changes: Any) -> dict[str, Any]:
    """A shipped demo source, unscheduled (runs come from the test) and re-harvested on every run."""
    document = yaml.safe_load((REPOSITORY_ROOT / "include" / "sources" / f"{name}.yaml").read_text())
    document.update(schedule=None, harvesting_lag=0, **changes)
    return document


@pytest.fixture(scope="module")
def sg_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxyServer]:
    """The SG forward proxy (AIRFLOW_CONN_PROXY_SG), counting what the slot's browser sent through it."""
    proxy = start_forward_proxy("SG", tmp_path_factory.mktemp("proxy"))
    yield proxy
    proxy.server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, mongo_server, demo_site_server,
            sg_proxy: ForwardProxyServer) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("cluster")
    sources = base / "sources"
    sources.mkdir()
    shop = unscheduled_source("demo_shop")
    shop["listing"]["max_new_urls"] = DEMO_PRODUCTS
    for name, document in (("demo_shop", shop), ("demo_shop_browser", unscheduled_source("demo_shop_browser"))):
        (sources / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    topology = Cluster(
        base, ClusterPorts.free(), mongo_uri=mongo_server.uri, mongo_database=f"test_cluster_{uuid.uuid4().hex[:8]}",
        demo_site_url=demo_site_server.url, sources_dir=sources, machines=[MACHINE_A, PAGESLOTS_MACHINE],
        harvester_overrides={"HARVESTER_PRODUCER_POLL_SECONDS": "2", "HARVESTER_LEASE_SECONDS": "20",
                             "HARVESTER_HEARTBEAT_SECONDS": "3"},
        proxies={"SG": sg_proxy.url},
        fast_unsafe_postgres=True, dag_refresh_seconds=5,
    )
    started = time.monotonic()
    try:
        topology.start()
        print(f"cluster started in {time.monotonic() - started:.0f}s", flush=True)
        yield topology
    finally:
        topology.destroy()
        client = mongo_server.client()
        client.drop_database(topology.mongo_database)
        client.close()


def run_to_the_end(cluster: Cluster, dag_id: str, timeout: float = 300, run_id: str | None = None) -> dict[str, Any]:
    run_id = run_id or cluster.airflow_api.trigger(dag_id)
    run = cluster.airflow_api.wait_for_run(dag_id, run_id, timeout=timeout)
    assert run["state"] == "success", (
        f"{dag_id} {run_id}: {run['state']}, tasks {run['task_states']}\n"
        + "\n".join(cluster.log_tail(name, 15) for name in ("airflow-worker", "airflow-triggerer", "distributor",
                                                            "worker-machine-a", "worker-machine-b", "worker-machine-c"))
    )
    return run


def report_of(cluster: Cluster, dag_id: str, run_id: str, task_id: str = "report") -> dict[str, Any]:
    """A task's return value (XCom) through the REST API."""
    with cluster.airflow_api.client() as client:
        response = client.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value")
        response.raise_for_status()
    value = response.json()["value"]
    return json.loads(value) if isinstance(value, str) else value


def batches_received(cluster: Cluster, machine: WorkerMachine, task: str = "harvester.scrape_batch") -> int:
    """Celery's "Task <name>[<id>] received" lines (not the task list printed at start-up)."""
    log = cluster.log_dir / f"worker-{machine.name}.log"
    return log.read_text(errors="replace").count(f"Task {task}[") if log.exists() else 0


def compose_healthcheck(cluster: Cluster, *command: str) -> subprocess.CompletedProcess[str]:
    """A healthcheck command of docker-compose.yaml, run with what that service's environment holds."""
    return subprocess.run(list(command), env=cluster.harvester_environment(), capture_output=True, text=True,
                          timeout=120, cwd=REPOSITORY_ROOT)


def test_a_harvest_runs_on_the_production_topology_and_survives_losing_a_worker_machine(cluster, mongo_server) -> None:
    products = mongo_server.client()[cluster.mongo_database]["demo_shop_products"]

    first = run_to_the_end(cluster, "harvest_demo_shop")
    report = report_of(cluster, "harvest_demo_shop", first["dag_run_id"])
    stored = products.count_documents({"run_id": first["dag_run_id"]})
    assert stored == report["records_stored"] == DEMO_PRODUCTS, report
    assert report["complete"], report
    assert batches_received(cluster, MACHINE_A) > 0  # machine-a was the only priority machine: it did the work

    # The compose healthchecks answer (the same commands, with the Redis password in the URL).
    for node in MACHINE_A.node_names():
        ping = compose_healthcheck(cluster, str(cluster.bin / "celery"), "-A", CELERY_APP, "inspect", "ping",
                                   "-d", node)
        assert ping.returncode == 0, ping.stdout + ping.stderr
    health = compose_healthcheck(cluster, str(cluster.bin / "harvester"), "health", "distributor",
                                 "--name", "distributor")
    assert health.returncode == 0, health.stderr

    # A second machine joins, then the first loses power: its whole process group gets SIGKILL.
    cluster.start_machine(MACHINE_B)
    assert batches_received(cluster, MACHINE_B) == 0
    cluster.kill_machine(MACHINE_A)
    assert not readiness.celery_nodes_answer(*cluster.broker, MACHINE_A.node_names()[:1])
    ping = compose_healthcheck(cluster, str(cluster.bin / "celery"), "-A", CELERY_APP, "inspect", "ping",
                               "-d", MACHINE_A.node_names()[0])
    assert ping.returncode != 0, "the healthcheck of a dead machine must fail"

    second = run_to_the_end(cluster, "harvest_demo_shop")
    report = report_of(cluster, "harvest_demo_shop", second["dag_run_id"])
    assert products.count_documents({"run_id": second["dag_run_id"]}) == report["records_stored"] == DEMO_PRODUCTS
    assert products.count_documents({}) == DEMO_PRODUCTS  # upserts: the second run rewrote, never duplicated
    assert batches_received(cluster, MACHINE_B) > 0, "the surviving machine did not serve the queue"


def test_a_page_slots_run_and_a_browser_harvest_succeed_on_the_production_topology(
        cluster, mongo_server, sg_proxy: ForwardProxyServer) -> None:
    """The browser harvest's tasks wait in SG's Redis list until a page slot takes them; the page_slots DAG
    (every minute, here also triggered) allocates an SG slot within the slot host's capacity and starts it
    there as a harvester.host_page_slot task; the slot's Chromium renders every page through the SG proxy."""
    rendered = mongo_server.client()[cluster.mongo_database]["demo_shop_rendered"]
    sg_proxy.reset()
    browser_run = cluster.airflow_api.trigger("harvest_demo_shop_browser")
    slots_run = run_to_the_end(cluster, "page_slots", timeout=300)
    assert set(slots_run["task_states"].values()) == {"success"}, slots_run["task_states"]  # ran, not skipped
    browser = run_to_the_end(cluster, "harvest_demo_shop_browser", timeout=300, run_id=browser_run)

    report = report_of(cluster, "harvest_demo_shop_browser", browser["dag_run_id"])
    planned = report["urls_planned"]
    assert planned == 5 and report["complete"] and report["tasks_failed"] == 0, report
    assert rendered.count_documents({"run_id": browser_run}) == report["records_stored"] == planned, report
    assert len(rendered.distinct("sku")) == rendered.count_documents({}) == planned  # each record landed once

    # Rendered by a slot of the slot host: its Celery worker received host_page_slot, the slot record names it.
    assert batches_received(cluster, PAGESLOTS_MACHINE, "harvester.host_page_slot") >= 1
    assert batches_received(cluster, MACHINE_A, "harvester.host_page_slot") == 0
    slots = compose_healthcheck(cluster, str(cluster.bin / "harvester"), "slots", "--json")
    assert slots.returncode == 0, slots.stderr
    census = json.loads(slots.stdout)
    sg_slots = [slot for slot in census["slots"] if slot["country"] == "SG"]
    assert sg_slots and {slot["worker"] for slot in sg_slots} == {PAGESLOTS_MACHINE.node_names()[0]}, census["slots"]
    assert sum(slot["pages_served"] for slot in sg_slots) >= planned, sg_slots
    # The allocator's last decision: one SG slot, capped by the slot host's live capacity (concurrency 1).
    figures = census["last_decision"]["figures"]
    assert figures["desired"] == {"SG": 1} and figures["live_capacity"] == PAGESLOTS_MACHINE.concurrency, figures

    # Every product page went through the SG proxy (Playwright sends loopback through it too). The slot's
    # navigations are fetched by Playwright (route.fetch, so each redirect hop is checked) and reach the
    # proxy as CONNECT tunnels to the demo site, whose plain-HTTP request lines the proxy reads.
    stats = sg_proxy.stats()
    demo_host = cluster.resolved_demo_site_url.split("://", 1)[1]
    assert stats["by_host"].get(demo_host, 0) >= 1 and stats["bytes_by_host"][demo_host] >= planned * 1000, stats
    proxied = {url.split(demo_host, 1)[-1] for url in stats["urls"]}
    assert {f"/js/product/{number}" for number in range(1, 6)} <= proxied, stats["urls"]
