"""Airflow adapter: the trigger behind ``wait_for_harvest``. It runs in the triggerer, not a worker slot.

Every poll it settles the run (its dead-lettered tasks counted down), measures it and logs one progress line, which
Airflow shows in the sensor's task log while the run is deferred. It carries connection ids, never
URIs (the trigger table would hold the passwords): the triggerer resolves them itself, through
Airflow's ``aget_connection`` first, then ``AIRFLOW_CONN_<ID>`` and the HARVESTER_* defaults.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, ParamSpec, TypeVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from harvester.connections import (
    MONGO_DEFAULT,
    REDIS_DEFAULT,
    aresolve_mongo,
    aresolve_redis,
    mongo_client_for,
    redis_client_for,
)
from harvester.errors import StorageError, mongo_storage_errors, redis_storage_errors
from harvester.producer import RunSettlement
from harvester.settings import get_settings

P = ParamSpec("P")
T = TypeVar("T")


def _storage_call(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function``'s result; the settlement reads MongoDB and Redis itself, so their errors are wrapped here."""
    with mongo_storage_errors(), redis_storage_errors():
        return function(*args, **kwargs)


class HarvestProgressTrigger(BaseTrigger):
    """Fires once every package of the run is finished (or its remaining tasks are dead), or at the deadline."""

    def __init__(self, source: str, run_id: str, output_collection: str, database: str, output_database: str,
                 poll_seconds: float, deadline: float, mongo_connection_id: str = MONGO_DEFAULT,
                 output_connection_id: str = MONGO_DEFAULT, redis_connection_id: str = REDIS_DEFAULT) -> None:
        super().__init__()
        self.source = source
        self.run_id = run_id
        self.output_collection = output_collection
        self.database = database
        self.output_database = output_database
        self.poll_seconds = poll_seconds
        self.deadline = deadline
        self.mongo_connection_id = mongo_connection_id
        self.output_connection_id = output_connection_id
        self.redis_connection_id = redis_connection_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "source": self.source, "run_id": self.run_id, "output_collection": self.output_collection,
                "database": self.database, "output_database": self.output_database,
                "poll_seconds": self.poll_seconds, "deadline": self.deadline,
                "mongo_connection_id": self.mongo_connection_id,
                "output_connection_id": self.output_connection_id,
                "redis_connection_id": self.redis_connection_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settlement = await self._settlement()
        while True:
            try:
                progress = await asyncio.to_thread(
                    _storage_call, settlement.settle_and_measure, self.source, self.output_collection, self.run_id)
            except StorageError as error:
                # A blip must not fail a long run: log it and look again at the next poll.
                self.log.warning("progress of %s unavailable for now: %s", self.run_id, str(error).splitlines()[0])
            else:
                self.log.info("%s", progress.line())
                if progress.complete:
                    yield TriggerEvent({"status": "complete", "progress": progress.to_dict()})
                    return
                if time.time() >= self.deadline:
                    yield TriggerEvent({"status": "timeout", "progress": progress.to_dict()})
                    return
            await asyncio.sleep(self.poll_seconds)

    async def _settlement(self) -> RunSettlement:
        """Resolve the ids in the triggerer; the clients are the triggerer process's cached ones, shared
        by every trigger it runs (one pool per server, not one per deferred sensor)."""
        settings = get_settings()  # the triggerer's own environment: the trigger carries ids only
        main = await aresolve_mongo(self.mongo_connection_id, settings)
        output = await aresolve_mongo(self.output_connection_id, settings)
        redis_target = await aresolve_redis(self.redis_connection_id, settings)
        return RunSettlement(mongo_client_for(main, settings)[self.database],
                             mongo_client_for(output, settings)[self.output_database],
                             redis_client_for(redis_target))
