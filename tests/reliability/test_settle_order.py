"""Fault-matrix row 6 b: MongoDB failing at the package count-down must never strand a package.

The batch writes its records (the output MongoDB answers), then the count-down of the package fails
(the packages' MongoDB does not answer: a real client on a closed loopback port). The tasks must stay
owed: not counted done, back for a retry, so that once the packages answer again the run finishes on
its own, every record stored exactly once.
"""

from __future__ import annotations

import pymongo
import pytest
from harvester.services.ports import LOOPBACK, free_port
from harvester.storage.packages import PackageStore
from harvester.workers.batch import BatchRunner

from tests.reliability.harness import Harvest

pytestmark = pytest.mark.integration


def run_admitted(runner: BatchRunner, harvest: Harvest, wanted: int = 16) -> int:
    """What the distributor and one Celery delivery do: admit, then run the batch in this process."""
    admission = harvest.store.admit(harvest.source.name, wanted)
    if not admission.messages:
        return 0
    batch = admission.deliveries()
    harvest.store.mark_published(harvest.source.name, admission.leases())
    runner.run(batch)
    return len(batch)


def test_row_6_b_mongodb_failing_at_the_count_down(harvest_factory, demo_site) -> None:
    harvest = harvest_factory("row6b", count=6, delay=0.0, package_size=6,
                              rate_limit={"max_active": 10, "per_minute": 1000})
    harvest.start()
    runner = BatchRunner(harvest.settings)
    try:
        unreachable = pymongo.MongoClient(f"mongodb://{LOOPBACK}:{free_port()}/?directConnection=true",
                                          serverSelectionTimeoutMS=300, connectTimeoutMS=300)
        runner.clients._packages = PackageStore(unreachable[harvest.settings.mongo_database])
        assert run_admitted(runner, harvest) == 6
        assert harvest.stored() == 6  # the records were written ...
        stats = harvest.store.stats([harvest.source.name])[harvest.source.name]
        assert stats.done == 0  # ... but the tasks are not done: their package was not counted down
        assert stats.active + stats.delayed + stats.pending == 6

        runner.clients._packages = PackageStore(harvest.database)  # the packages answer again
        harvest.wait_until(lambda: run_admitted(runner, harvest) == 0 and harvest.finished(), 30,
                           "the retries to count the package down", poll=0.3)
        harvest.assert_every_row_holds()
    finally:
        runner.close()
