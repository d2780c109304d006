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

from harvester.distributor import DeadLettering
from harvester.settings import HarvesterSettings, get_settings

log = logging.getLogger(__name__)


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
