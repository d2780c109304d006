"""Redis failover under a harvest: a primary, a replica and three Redis Sentinels
(harvester.services.catalogue, as the cluster mode runs them), the distributor and a Celery worker (broker:
kombu's sentinel:// transport; every other client: redis-py's Sentinel through the connection factory), the
demo site and the tests' MongoDB. The primary is SIGKILLed mid-harvest; the sentinels promote the replica.

The run must finish on its own, every record must land exactly once and the site must never see more than
``max_active`` requests in flight nor more than ``per_minute`` starts in a window (the fault matrix's three
promises, tests/reliability/harness.py). What asynchronous replication may lose (the primary's last writes)
comes back as docs/production.md says: by lease expiry, the lost-message check and idempotent upserts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from harvester.connections import close_clients, redis_client

from tests.fixtures.sentinel import FAST_SENTINEL_PLAN, RedisSentinelGroup
from tests.fixtures.servers import ServerProcess
from tests.reliability.harness import FAST_RELIABILITY_SETTINGS, Harvest, slow_product_urls, write_source_file

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def sentinel_harvest(configure_settings, redis_sentinel_group: RedisSentinelGroup, demo_site, mongo_server
                     ) -> Iterator[Callable[..., Harvest]]:
    """A harvest whose every Redis client (this process's, the distributor's, the worker's) goes through
    the group's sentinels: HARVESTER_REDIS_URL names a port nobody listens on, so nothing can reach a
    server except through them."""

    def build(name: str, count: int, delay: float, rate_limit: dict[str, int]) -> Harvest:
        group = redis_sentinel_group
        configured = configure_settings(**{
            **FAST_RELIABILITY_SETTINGS, "lost_message_check_seconds": 2,
            "redis_url": f"redis://:{group.password}@127.0.0.1:1/0", "redis_sentinels": group.sentinels,
            "redis_sentinel_master": group.plan.master_name, "redis_sentinel_password": group.password})
        source = write_source_file(configured, demo_site, name, retries=3, timeout=10, rate_limit=rate_limit)
        client = redis_client(settings=configured)
        database = mongo_server.client()[configured.mongo_database]
        return Harvest(configured, client, database, demo_site, source, f"run-{name}",
                       slow_product_urls(demo_site, count, delay), package_size=10)

    yield build
    close_clients()


def check_alive(*processes: ServerProcess) -> None:
    """Outages are waited out, never fatal: a process that died of the failover fails the test at once."""
    for process in processes:
        if not process.alive():
            tail = process.log_path.read_text(errors="replace")[-3000:]
            pytest.fail(f"{process.name} died during the failover; its log ends:\n{tail}")


def test_the_primary_sigkilled_mid_harvest_the_replica_takes_over_and_the_run_lands_once(
        sentinel_harvest, redis_sentinel_group: RedisSentinelGroup, celery_worker_factory, start_distributor) -> None:
    group = redis_sentinel_group
    harvest = sentinel_harvest("failover", count=60, delay=0.3, rate_limit={"max_active": 4, "per_minute": 40})
    distributor = start_distributor()
    worker = celery_worker_factory(queues="default", concurrency=2)
    harvest.start()
    harvest.wait_until(lambda: harvest.stored() >= 12, 90, "mid-harvest", poll=0.1)
    old_primary = group.primary_port()
    killed_at = group.kill_primary()
    stored_at_kill = harvest.stored()
    promoted_at = group.wait_failover(old_primary, timeout=90)
    assert group.primary_port() == group.ports["replica"]
    harvest.wait_finished(timeout=240, during=lambda: check_alive(distributor, worker))
    finished_at = time.monotonic()
    seen = harvest.assert_every_row_holds()
    assert stored_at_kill < len(harvest.urls), "the primary died after the harvest, not during it"
    print(f"failover: primary SIGKILLed with {stored_at_kill}/{len(harvest.urls)} stored; replica promoted "
          f"{promoted_at - killed_at:.1f}s later (down-after {FAST_SENTINEL_PLAN.down_after_ms} ms); run finished "
          f"{finished_at - killed_at:.1f}s after the kill; the site saw at most {seen['max_concurrent']} in flight, "
          f"most fetches of one page {max(seen['paths'].values())}")
