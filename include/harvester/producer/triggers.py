"""Airflow adapter: the trigger behind ``wait_for_harvest``. It runs in the triggerer, not a worker slot.

Every poll it settles dead-lettered tasks, measures the run and logs one progress line, which
Airflow shows in the sensor's task log while the run is deferred.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pymongo
import redis
from airflow.triggers.base import BaseTrigger, TriggerEvent

from harvester.producer.progress import RunMonitor


class HarvestProgressTrigger(BaseTrigger):
    """Fires once every package of the run is finished (or its remaining tasks are dead), or at the deadline."""

    def __init__(self, source: str, run_id: str, output_collection: str, mongo_uri: str, database: str,
                 output_mongo_uri: str, output_database: str, redis_url: str, poll_seconds: float,
                 deadline: float, mongo_timeout_ms: int = 10_000, mongo_options: dict[str, Any] | None = None,
                 output_mongo_options: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.source = source
        self.run_id = run_id
        self.output_collection = output_collection
        self.mongo_uri = mongo_uri
        self.database = database
        self.output_mongo_uri = output_mongo_uri
        self.output_database = output_database
        self.redis_url = redis_url
        self.poll_seconds = poll_seconds
        self.deadline = deadline
        self.mongo_timeout_ms = mongo_timeout_ms
        self.mongo_options = dict(mongo_options or {})
        self.output_mongo_options = dict(output_mongo_options or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "source": self.source, "run_id": self.run_id, "output_collection": self.output_collection,
                "mongo_uri": self.mongo_uri, "database": self.database, "output_mongo_uri": self.output_mongo_uri,
                "output_database": self.output_database, "redis_url": self.redis_url,
                "poll_seconds": self.poll_seconds, "deadline": self.deadline,
                "mongo_timeout_ms": self.mongo_timeout_ms, "mongo_options": self.mongo_options,
                "output_mongo_options": self.output_mongo_options,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        clients: list[Any] = []
        try:
            monitor = await asyncio.to_thread(self._monitor, clients)
            while True:
                try:
                    progress = await asyncio.to_thread(monitor.measure, self.source, self.output_collection,
                                                       self.run_id)
                except (pymongo.errors.PyMongoError, redis.RedisError) as error:
                    # A blip must not fail a long run: log it and look again at the next poll.
                    self.log.warning("progress of %s unavailable for now: %s", self.run_id,
                                     str(error).splitlines()[0])
                else:
                    self.log.info("%s", progress.line())
                    if progress.complete:
                        yield TriggerEvent({"status": "complete", "progress": progress.to_dict()})
                        return
                    if time.time() >= self.deadline:
                        yield TriggerEvent({"status": "timeout", "progress": progress.to_dict()})
                        return
                await asyncio.sleep(self.poll_seconds)
        finally:
            for client in clients:
                client.close()

    def _monitor(self, clients: list[Any]) -> RunMonitor:
        timeout = {"serverSelectionTimeoutMS": self.mongo_timeout_ms}
        mongo = pymongo.MongoClient(self.mongo_uri, **{**timeout, **self.mongo_options})
        clients.append(mongo)
        output = mongo
        if (self.output_mongo_uri, self.output_mongo_options) != (self.mongo_uri, self.mongo_options):
            output = pymongo.MongoClient(self.output_mongo_uri, **{**timeout, **self.output_mongo_options})
            clients.append(output)
        redis_client = redis.Redis.from_url(self.redis_url)
        clients.append(redis_client)
        return RunMonitor(mongo[self.database], output[self.output_database], redis_client)
