"""Lease heartbeats: a batch vouches for its tasks for as long as it runs, and no longer."""

from __future__ import annotations

import logging
import threading
import time

import redis

from harvester.distributor import RateLimitStore

log = logging.getLogger(__name__)


class LeaseHeartbeat:
    """Extends the batch's leases every ``interval`` seconds from a thread, for as long as the batch runs
    (fetching AND storing: a slow bulk_write must not let the reaper hand the tasks to another worker).
    Heartbeating a released task does nothing, so it may run until the very end."""

    def __init__(self, store: RateLimitStore, source: str, task_ids: list[str], interval: float,
                 max_seconds: float | None = None) -> None:
        self.store, self.source, self.task_ids, self.interval = store, source, task_ids, interval
        self.max_seconds = max_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{source}", daemon=True)

    def __enter__(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        """Beat until stopped, or until ``max_seconds``: a batch stuck past every timeout stops being
        vouched for, so its leases expire and the reaper gives the tasks to another worker."""
        deadline = None if self.max_seconds is None else time.monotonic() + self.max_seconds
        while not self._stop.wait(self.interval):
            if deadline is not None and time.monotonic() > deadline:
                log.warning("batch of %s still running after %.0fs: no more heartbeats", self.source,
                            self.max_seconds)
                return
            try:
                self.store.heartbeat(self.source, self.task_ids)
            except redis.RedisError as error:
                log.warning("heartbeat of %s failed: %s", self.source, error)
