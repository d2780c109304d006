"""The slot host side of a Celery worker on the ``pageslots`` queue.

When such a worker is ready, a supervisor thread in its main process advertises its capacity (its
concurrency: one slot per pool process) with a heartbeat, resets slots whose process stopped heartbeating
(two missed beats: a slot process SIGKILLed), and kills browsers whose slot process is gone. On warm
shutdown it withdraws the capacity and asks its slot processes (SIGTERM) to close their pages, so the
worker can stop although a slot task would otherwise run for hours.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Any

import psutil
from celery.signals import worker_ready, worker_shutting_down

from harvester.errors import StorageError
from harvester.settings import HarvesterSettings, get_settings

log = logging.getLogger("harvester.pageslots.hosting")
_supervisor: SlotHostSupervisor | None = None


class SlotHostSupervisor:
    """Capacity heartbeat, dead-slot reset and orphan-browser reaping for one slot host."""

    def __init__(self, host: str, capacity: int, settings: HarvesterSettings) -> None:
        from harvester.pageslots.registry import SlotHosts, SlotRegistry

        self.settings = settings
        self.host, self.capacity = host, capacity
        from harvester.connections import redis_client

        self.redis = redis_client(settings=self.settings)
        self.hosts = SlotHosts(self.redis)
        self.registry = SlotRegistry(self.redis)
        self.interval = self.settings.page_slot_heartbeat_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slot-host-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def beat(self) -> None:
        from harvester.pageslots.heartbeat import reap_orphan_browsers
        from harvester.scraping import kill_process_tree

        self.hosts.advertise(self.host, self.capacity, 3 * self.interval)
        for slot in self.registry.reset_stale(2 * self.interval, self.settings.page_slot_claim_seconds):
            log.warning("slot %s reset from %s: its process (%s pid %s) stopped heartbeating", slot.id,
                        slot.previous, slot.worker, slot.process_id)
            if slot.browser_pid and _is_slot_browser(slot.browser_pid, slot.id):
                kill_process_tree(slot.browser_pid)
        reap_orphan_browsers()

    def _run(self) -> None:
        while True:
            try:
                self.beat()
            except StorageError as error:
                log.warning("slot host %s: supervisor could not reach Redis: %s", self.host, error)
            except Exception:  # the supervisor thread outlives any one round: logged, the next beat tries again
                log.exception("slot host %s: supervisor round failed", self.host)
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(StorageError):  # the capacity expires with its heartbeat anyway
            self.hosts.withdraw(self.host)


def _is_slot_browser(pid: int, slot_id: str) -> bool:
    from harvester.scraping import SLOT_FLAG

    try:
        return f"{SLOT_FLAG}{slot_id}" in psutil.Process(pid).cmdline()
    except psutil.Error:
        return False


def _consumes_pageslots(consumer: Any) -> bool:
    from harvester.queues import PAGESLOTS_QUEUE

    try:
        return any(queue.name == PAGESLOTS_QUEUE for queue in consumer.task_consumer.queues)
    except AttributeError:
        return False


def connect_slot_hosting() -> None:
    """Wire a worker's ready and shutdown signals to the slot-host supervisor (it starts only in a worker that
    consumes ``pageslots``). Idempotent: Celery's signals connect a receiver once."""
    worker_ready.connect(_start_supervisor)
    worker_shutting_down.connect(_stop_slots)


def _start_supervisor(sender: Any = None, **_: Any) -> None:
    global _supervisor
    if sender is None or not _consumes_pageslots(sender):
        return
    capacity = int(getattr(sender.controller, "concurrency", 1) or 1)
    _supervisor = SlotHostSupervisor(sender.hostname, capacity, get_settings())  # the worker's settings, read once
    _supervisor.start()
    log.info("slot host %s: hosting up to %d page slots", sender.hostname, capacity)


def _stop_slots(**_: Any) -> None:
    if _supervisor is None:
        return
    _supervisor.stop()
    for child in psutil.Process().children():  # the pool processes: each closes its slot's page and exits
        with contextlib.suppress(psutil.Error):
            child.send_signal(signal.SIGTERM)
