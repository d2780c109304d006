"""A worker process killed while its batch was taking on more tasks (harvester.workers.refill) loses none and
stores none twice: the batch's own tasks come back through the lost-batch path, the tasks it took on when their
leases expire, and the message that carried a taken-over task drops it. Real processes, as the fault matrix."""

from __future__ import annotations

import signal
from collections.abc import Callable

import psutil
import pytest

from tests.fixtures.demo_site import DemoSiteServer
from tests.fixtures.servers import ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def kill_pool_children(worker: ServerProcess) -> int:
    assert worker.process is not None
    children = psutil.Process(worker.process.pid).children()
    for child in children:
        child.send_signal(signal.SIGKILL)
    return len(children)


def test_a_worker_process_killed_mid_refill_loses_no_task(
        harvest_factory, celery_worker_factory: Callable[..., ServerProcess], start_distributor,
        demo_site: DemoSiteServer) -> None:
    # every fourth page answers after 3 s: the batches refill around it
    urls = [f"{demo_site.url}/slow/{n}?delay={3 if n % 4 == 0 else 0.2}" for n in range(1, 41)]
    harvest = harvest_factory("refill_kill", urls=urls, rate_limit={"max_active": 8, "per_minute": 400})
    start_distributor()
    worker = celery_worker_factory(queues="default", concurrency=2)
    harvest.start()

    def refilling() -> bool:
        counters = harvest.store.counters(harvest.source.name)
        took = counters.get("taken_over", 0) + counters.get("outcome:refilled", 0)
        return took >= 1 and harvest.site.client_stats(harvest.source.name)["current"] > 0

    harvest.wait_until(refilling, 60, "a batch taking on more tasks")
    assert kill_pool_children(worker) >= 1  # the pool processes die as a crash would, mid-refill
    harvest.wait_finished(timeout=120)
    harvest.assert_every_row_holds()
    assert worker.alive()
