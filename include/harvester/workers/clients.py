"""The clients a worker process shares between its pipeline parts (what Scrapy's crawler is to its
middlewares): built once per process from settings, handed to every part's ``from_settings``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from harvester.connections import MONGO_DEFAULT, REDIS_DEFAULT, mongo_client
from harvester.connections import redis_client as connect_redis
from harvester.distributor import Intake, RateLimitStore
from harvester.settings import HarvesterSettings
from harvester.storage import DataHandler, RunFrontier, URLStore

if TYPE_CHECKING:
    from harvester.storage import PackageStore


class WorkerClients:
    """Redis and its stores, the data handler, and the package store (MongoDB, opened on first use)."""

    def __init__(self, settings: HarvesterSettings, redis_client: redis.Redis | None = None,
                 data: DataHandler | None = None) -> None:
        self.settings = settings
        self.redis = redis_client or connect_redis(REDIS_DEFAULT, settings=settings)
        self.store = RateLimitStore(self.redis, settings)
        self.intake = Intake(self.redis, settings)
        self.urls = URLStore(self.redis)
        self.frontier = RunFrontier(self.redis)
        self.data = data or DataHandler(settings)
        self._packages: PackageStore | None = None

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> WorkerClients:
        return cls(settings)

    @property
    def packages(self) -> PackageStore:
        """Opened on first use: a batch without runs or packages never needs MongoDB for them."""
        if self._packages is None:
            from harvester.storage import PackageStore

            client = mongo_client(MONGO_DEFAULT, settings=self.settings)
            self._packages = PackageStore(client[self.settings.mongo_database])
        return self._packages

    def close(self) -> None:
        self.redis.close()
