"""A batch whose pool process died (SIGKILL, a segfault, the OOM killer, memory recycling gone wrong).

Celery acknowledges such a message (``task_reject_on_worker_lost`` is off: redelivering it would fetch
outside admission and loop a poison message forever) and tells the worker's main process through the
``task_failure`` signal with a ``WorkerLostError``. This module hands the batch's tasks back through
admission (``DeadLettering.worker_lost``): a started task is retried after a lease, so the dead
process's requests drain at the site first; a task whose batch killed its worker twice is dead-lettered
with that reason, and counted down as failed in its package so its run still finishes.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import redis

from harvester.distributor import DeadLettering
from harvester.errors import redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import text
from harvester.settings import HarvesterSettings, get_settings

log = logging.getLogger(__name__)


class BatchHoldings:
    """The tasks a refilling batch took on beside its message's own (harvester.workers.refill), kept in Redis under
    the first of its own task ids: the message, all the handler of a dead pool process knows, then names them too,
    so a poison page a batch took on counts its kills as one of its own would (and is dead-lettered after
    ``worker_kills_allowed``, not after every retry)."""

    def __init__(self, client: redis.Redis, source: str, own_task_ids: list[str], keep_seconds: float) -> None:
        self.client, self.keep_seconds = client, keep_seconds
        self.key = SourceKeys(source).batch_holdings(own_task_ids[0]) if own_task_ids else ""

    @redis_storage_errors()
    def add(self, leases: dict[str, str]) -> None:
        if not self.key or not leases:
            return
        pipeline = self.client.pipeline(transaction=False)
        pipeline.hset(self.key, mapping=leases).expire(self.key, max(1, int(self.keep_seconds)))
        pipeline.execute()

    @redis_storage_errors()
    def clear(self) -> None:
        if self.key:
            self.client.delete(self.key)

    @staticmethod
    @redis_storage_errors()
    def of(client: redis.Redis, source: str, own_task_ids: list[str]) -> dict[str, str]:
        """What the batches of these task ids took on (one round trip; a task id that started no refill has none)."""
        pipeline = client.pipeline(transaction=False)
        for task_id in own_task_ids:
            pipeline.hgetall(SourceKeys(source).batch_holdings(task_id))
        held: dict[str, str] = {}
        for reply in pipeline.execute():
            held.update({text(task_id): text(token) for task_id, token in reply.items()})
        return held


class LostBatchHandler:
    """Settles the tasks of lost batches; lives in the worker's main process (clients opened on first use)."""

    def __init__(self, settings: HarvesterSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._clients: Any = None

    @property
    def clients(self) -> Any:
        with self._lock:
            if self._clients is None:
                from harvester.workers.clients import WorkerClients

                self._clients = WorkerClients.from_settings(self.settings)
            return self._clients

    def settle(self, raw_messages: Iterable[dict[str, Any]]) -> int:
        """Hand every task of the lost batch back; returns how many were dead-lettered."""
        by_source: dict[str, dict[str, str]] = defaultdict(dict)
        for raw in raw_messages:
            if isinstance(raw, dict) and raw.get("lease_token") and raw.get("source") and raw.get("task_id"):
                by_source[str(raw["source"])][str(raw["task_id"])] = str(raw["lease_token"])
        clients = self.clients
        dead_lettering = DeadLettering(clients.store, lambda: clients.packages)
        dead = 0
        for source, leases in by_source.items():
            taken_on = BatchHoldings.of(clients.store.redis, source, list(leases))
            leases = {**taken_on, **leases}
            result = dead_lettering.worker_lost(source, leases)
            log.warning("%s: the pool process running a batch of %d tasks died; %d retried after a lease, %d not "
                        "started returned, %d dead-lettered", source, len(leases), result.retried, result.returned,
                        len(result.dead_entries))
            dead += len(result.dead_entries)
        return dead


_handler: LostBatchHandler | None = None


def lost_batch_handler() -> LostBatchHandler:
    global _handler
    if _handler is None:
        _handler = LostBatchHandler(get_settings())  # the worker's main process: its settings, read once
    return _handler
