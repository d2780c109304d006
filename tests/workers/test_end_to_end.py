"""Issue 5's done-when: real Redis, MongoDB, the distributor process, Celery workers and the demo site.

A listing -> details crawl of the 500-product catalogue lands exactly 500 records, the package
finishes, and the demo site never saw more requests of this source in flight than ``max_active``.
"""

from __future__ import annotations

import os
import time

import pytest
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.producer.packages import PackageStatus, PackageStore, PackageTask, planned_task_id

from tests.fixtures.servers import VENV_BIN, ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MAX_ACTIVE = 4


@pytest.fixture
def distributor(worker_settings, tmp_path):
    server = ServerProcess("distributor", [str(VENV_BIN / "harvester"), "distributor"],
                           tmp_path / "distributor.log", ready=lambda: True, env=dict(os.environ))
    server.start(timeout=30)
    yield server
    server.stop()


def test_listing_to_details_crawl_of_500_pages(write_source, worker_settings, demo_site, mongo_server,
                                              redis_client, celery_worker_factory, distributor) -> None:
    source = write_source("e2e_shop", rate_limit={"max_active": MAX_ACTIVE, "per_minute": 100_000})
    celery_worker_factory(queues="default", concurrency=2)
    database = mongo_server.client()[worker_settings.mongo_database]
    packages = PackageStore(database)
    packages.ensure_indexes()
    seed = source.input.seeds[0]
    run_id = "run-e2e"
    seed_task = PackageTask(planned_task_id(source.name, run_id, 0, seed), seed, "listing", 0)
    packages.create_packages(source.name, run_id, [(0, [seed_task])])
    Intake(redis_client, worker_settings).push(source, [TaskMessage(
        task_id=seed_task.task_id, source=source.name, kind="listing", url=seed, run_id=run_id, package_id=0)])

    collection = database[source.output_collection]
    store = RateLimitStore(redis_client, worker_settings)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        package = database["packages"].find_one({"source": source.name, "run_id": run_id})
        if package["status"] == PackageStatus.FINISHED:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"crawl did not finish: {store.stats([source.name])}, {collection.count_documents({})} records")

    assert collection.count_documents({}) == 500
    assert len(collection.distinct("url")) == 500
    assert collection.count_documents({"run_id": run_id, "sku": {"$regex": "^SKU-"}}) == 500
    assert len(package["done"]) == 510 and package["failed"] == []  # 500 details + 10 listing pages
    observed = demo_site.client_stats(source.name)
    assert observed["total"] == 510
    assert 2 <= observed["max_concurrent"] <= MAX_ACTIVE, observed
    stats = store.stats([source.name])[source.name]
    assert stats.active == 0 and stats.pending == 0 and stats.dead == 0
