"""A slot's heartbeat and the orphan-browser reaper: what keeps a slot record honest while its process lives,
and its Chromium from outliving it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psutil
import redis

from harvester.errors import StorageError
from harvester.pageslots.registry import Orders, SlotRegistry
from harvester.scraping import OWNER_FLAG, SLOT_FLAG, flag_value, kill_process_tree
from harvester.settings import HarvesterSettings

log = logging.getLogger("harvester.pageslots.host")


class SlotHeartbeat:
    """Heartbeats the slot record and the running task's lease from a thread (a page load may take its whole
    timeout), and keeps the latest orders for the loop. ``lost`` once the slot is no longer ours."""

    def __init__(self, client: redis.Redis, settings: HarvesterSettings, slot_id: str, owner: str,
                 browser_pid: Callable[[], int | None]) -> None:
        from harvester.distributor import RateLimitStore

        self.registry = SlotRegistry(client)
        self.store = RateLimitStore(client, settings)
        self.slot_id, self.owner, self.browser_pid = slot_id, owner, browser_pid
        self.interval = settings.page_slot_heartbeat_seconds
        self.orders: Orders | None = None
        self.lost = False
        self.task: tuple[str, str, str] | None = None  # (source, task id, lease token) while one runs
        self.task_until: float | None = None  # monotonic time past which the task's lease is no longer extended
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"slot-heartbeat-{slot_id}", daemon=True)

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def hold(self, task: tuple[str, str, str], seconds: float) -> None:
        """Vouch for the running task's lease for ``seconds`` at most: a task stuck past every timeout stops
        being heartbeaten, so the reaper hands it on (as a batch's LeaseHeartbeat stops at its deadline)."""
        self.task_until = time.monotonic() + seconds
        self.task = task

    def let_go(self) -> None:
        self.task, self.task_until = None, None

    def beat(self) -> Orders | None:
        try:
            orders = self.registry.heartbeat(self.slot_id, self.owner, self.browser_pid())
            task, until = self.task, self.task_until
            if task is not None and until is not None and time.monotonic() > until:
                log.warning("slot %s: task %s of %s still running past its deadline: its lease is no longer "
                            "extended", self.slot_id, task[1], task[0])
            elif task is not None:
                self.store.heartbeat(task[0], {task[1]: task[2]})
        except StorageError as error:  # Redis restarting: keep going, the loop retries too
            log.warning("slot %s: heartbeat failed: %s", self.slot_id, error)
            return self.orders
        if orders is None:
            self.lost = True
        else:
            self.orders = orders
        return orders

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()
            if self.lost:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def reap_orphan_browsers() -> list[int]:
    """Kill slot browsers whose owning process is gone (a slot process SIGKILLed leaves its Chromium)."""
    reaped = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        command = process.info.get("cmdline") or []
        owner = flag_value(command, OWNER_FLAG)
        if owner is None or any(a.startswith("--type=") for a in command):
            continue
        try:
            owner_alive = psutil.pid_exists(int(owner)) and psutil.Process(int(owner)).status() != "zombie"
        except (ValueError, psutil.Error):
            owner_alive = False
        if not owner_alive:
            log.warning("killing orphan slot browser pid %s (slot %s, owner %s gone)", process.pid,
                        flag_value(command, SLOT_FLAG), owner)
            kill_process_tree(process.pid)
            reaped.append(process.pid)
    return reaped
