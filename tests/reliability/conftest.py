"""Fixtures of the fault matrix: a harvest of one source with short leases and windows (also exported
as HARVESTER_* so the distributor and worker subprocesses see the same settings)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import distributor_env, settings  # noqa: F401 (the store tests' fixtures)
from tests.fixtures.demo_site import DemoSiteServer
from tests.fixtures.servers import MongoServer
from tests.reliability.harness import FAST_RELIABILITY_SETTINGS, Harvest, slow_product_urls, write_source_file


@pytest.fixture
def harvest_factory(
    configure_settings: Callable[..., HarvesterSettings], demo_site: DemoSiteServer, mongo_server: MongoServer,
    redis_client: redis.Redis,
) -> Callable[..., Harvest]:
    """Build one run: ``count`` slow product pages of a fresh source, in packages of ``package_size``."""

    def build(name: str, count: int = 40, delay: float = 0.3, package_size: int = 10,
              rate_limit: dict[str, Any] | None = None, retries: int = 3, overrides: dict[str, Any] | None = None,
              urls: list[str] | None = None) -> Harvest:
        configured = configure_settings(**{**FAST_RELIABILITY_SETTINGS, **(overrides or {})})
        source = write_source_file(configured, demo_site, name, retries=retries, timeout=10,
                                   rate_limit=rate_limit or {"max_active": 4, "per_minute": 40})
        database = mongo_server.client()[configured.mongo_database]
        return Harvest(configured, redis_client, database, demo_site, source, f"run-{name}",
                       urls or slow_product_urls(demo_site, count, delay), package_size)

    return build
