"""Slot records in Redis, the authority on page slots (DESIGN.md section 5).

One hash per slot (id, country, state, worker: the Celery node name of its slot host, process id, browser pid,
pages served, consecutive failures, last used, heartbeat, and the allocator's orders: retire, next country),
indexed per country. Every change is one atomic Lua call with the Redis server's clock, so allocators and slot
hosts on any number of machines agree on what each slot is doing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import redis

from harvester.errors import SlotTransitionRefused, redis_storage_errors
from harvester.pageslots.scripts import page_slot_scripts
from harvester.redis_keys import PageSlotKeys

KEYS = PageSlotKeys()


class SlotState(StrEnum):
    """The page slot state machine of DESIGN.md section 5."""

    NO_PAGE = "NO_PAGE"
    PREPARING_PAGE = "PREPARING_PAGE"
    PAGE_READY = "PAGE_READY"
    RUNNING_SCRAPING_TASK = "RUNNING_SCRAPING_TASK"
    CLOSING_PAGE = "CLOSING_PAGE"


LEGAL_TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {  # the same table as lua/common.lua
    SlotState.NO_PAGE: frozenset({SlotState.PREPARING_PAGE}),
    SlotState.PREPARING_PAGE: frozenset({SlotState.PREPARING_PAGE, SlotState.PAGE_READY, SlotState.NO_PAGE}),
    SlotState.PAGE_READY: frozenset({SlotState.RUNNING_SCRAPING_TASK, SlotState.CLOSING_PAGE}),
    SlotState.RUNNING_SCRAPING_TASK: frozenset(
        {SlotState.PAGE_READY, SlotState.CLOSING_PAGE, SlotState.PREPARING_PAGE}),
    SlotState.CLOSING_PAGE: frozenset({SlotState.NO_PAGE}),
}


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def _float(value: str) -> float | None:
    return float(value) if value else None


@dataclass(frozen=True)
class SlotRecord:
    """One slot as Redis holds it."""

    id: str
    country: str
    state: SlotState
    worker: str = ""  # the Celery node name of the slot host whose process holds it (pageslots@<machine>)
    process_id: int | None = None
    browser_pid: int | None = None
    pages_served: int = 0
    consecutive_failures: int = 0
    last_used: float | None = None
    heartbeat: float | None = None
    state_since: float | None = None
    owner: str = ""
    task: str = ""
    retire: bool = False
    next_country: str = ""
    reason: str = ""

    @classmethod
    def from_hash(cls, fields: dict[bytes | str, bytes | str]) -> SlotRecord:
        values = {_text(key): _text(value) for key, value in fields.items()}
        return cls(
            id=values["id"], country=values["country"], state=SlotState(values["state"]),
            worker=values.get("worker", ""),
            process_id=int(values["process_id"]) if values.get("process_id") else None,
            browser_pid=int(values["browser_pid"]) if values.get("browser_pid") else None,
            pages_served=int(values.get("pages_served") or 0),
            consecutive_failures=int(values.get("consecutive_failures") or 0),
            last_used=_float(values.get("last_used", "")), heartbeat=_float(values.get("heartbeat", "")),
            state_since=_float(values.get("state_since", "")), owner=values.get("owner", ""),
            task=values.get("task", ""), retire=values.get("retire") == "1",
            next_country=values.get("next_country", ""), reason=values.get("reason", ""),
        )

    @property
    def leaving(self) -> bool:
        """Ordered to be deleted or moved once its current work ends."""
        return self.retire or bool(self.next_country)

    @property
    def country_after_orders(self) -> str | None:
        """The country this slot will serve once its orders are carried out (None: it will be deleted)."""
        if self.retire:
            return None
        return self.next_country or self.country


@dataclass(frozen=True)
class TransitionResult:
    previous: SlotState
    outcome: str  # the new state, or "deleted" / "moved" when the slot landed in NO_PAGE with such an order


@dataclass(frozen=True)
class Orders:
    """What a heartbeat tells the owning process."""

    state: SlotState
    country: str
    retire: bool
    next_country: str

    @property
    def leaving(self) -> bool:
        return self.retire or bool(self.next_country)


@dataclass(frozen=True)
class ResetSlot:
    """A slot reset because its process stopped heartbeating."""

    id: str
    previous: SlotState
    worker: str
    process_id: int | None
    browser_pid: int | None
    outcome: str


class SlotRegistry:
    """Every slot transition, each one atomic Lua call against the slot records."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self.scripts = page_slot_scripts(client)

    # -- reading -----------------------------------------------------------------------------------
    @redis_storage_errors()
    def slots(self) -> list[SlotRecord]:
        """Every slot record (one round trip for the ids, one pipelined for the records)."""
        ids = sorted(_text(slot_id) for slot_id in self.redis.smembers(KEYS.all_slots))
        if not ids:
            return []
        pipeline = self.redis.pipeline(transaction=False)
        for slot_id in ids:
            pipeline.hgetall(KEYS.slot(slot_id))
        return [SlotRecord.from_hash(fields) for fields in pipeline.execute() if fields]

    @redis_storage_errors()
    def get(self, slot_id: str) -> SlotRecord | None:
        fields = self.redis.hgetall(KEYS.slot(slot_id))
        return SlotRecord.from_hash(fields) if fields else None

    def by_country(self) -> dict[str, list[SlotRecord]]:
        grouped: dict[str, list[SlotRecord]] = defaultdict(list)
        for record in self.slots():
            grouped[record.country].append(record)
        return dict(grouped)

    # -- the allocator's changes ---------------------------------------------------------------------
    @redis_storage_errors()
    def create(self, country: str, count: int) -> list[str]:
        if count <= 0:
            return []
        reply = self.scripts.call("slot_create", KEYS, {"country_slots": KEYS.country_slots(country)},
                                  country=country, count=int(count), slot_prefix=KEYS.slot_prefix)
        return reply.slot_ids

    @redis_storage_errors()
    def reassign(self, slot_id: str, country: str | None) -> str:
        """Delete (``country=None``) or move a slot; a busy one finishes first. Returns what happened."""
        reply = self.scripts.call("slot_reassign", KEYS, {"slot": KEYS.slot(slot_id)}, slot_id=slot_id,
                                  new_country=country or "", country_prefix=KEYS.country_slots_prefix)
        return reply.status

    @redis_storage_errors()
    def reset_stale(self, stale_after_seconds: float, unclaimed_after_seconds: float | None = None) -> list[ResetSlot]:
        """Slots silent for ``stale_after_seconds``; one never claimed waits ``unclaimed_after_seconds`` (default
        the same): its hosting task may still be queued behind busy worker processes, which is not death."""
        unclaimed = stale_after_seconds if unclaimed_after_seconds is None else unclaimed_after_seconds
        flat = self.scripts.call("slot_reset_stale", KEYS, stale_after_seconds=float(stale_after_seconds),
                                 slot_prefix=KEYS.slot_prefix, country_prefix=KEYS.country_slots_prefix,
                                 unclaimed_after_seconds=float(unclaimed)).reset_slots
        fields = iter(flat)  # six per reset slot, in the order the script's header names them
        return [
            ResetSlot(slot_id, SlotState(previous), worker, int(process_id) if process_id else None,
                      int(browser_pid) if browser_pid else None, outcome)
            for slot_id, previous, worker, process_id, browser_pid, outcome in zip(*[fields] * 6, strict=True)
        ]

    # -- transitions -----------------------------------------------------------------------------------
    @redis_storage_errors()
    def transition(
        self, slot_id: str, target: SlotState, owner: str = "", *, required: SlotState | None = None,
        min_idle_seconds: float | None = None, reason: str = "", fields: dict[str, str | int] | None = None,
    ) -> TransitionResult:
        """Change a slot's state along a legal transition, or raise :class:`SlotTransitionRefused`.

        ``owner`` is the host process's token ('' for the allocator's jobs); ``required`` the state the
        slot must be in; ``min_idle_seconds`` refuses a slot used more recently (idle closing); ``fields``
        are set at the same time (a value "+N" adds N).
        """
        pairs: list[str] = []
        for name, value in (fields or {}).items():
            pairs += [name, str(value)]
        reply = self.scripts.call(
            "slot_transition", KEYS, {"slot": KEYS.slot(slot_id)}, slot_id=slot_id, target=target.value, owner=owner,
            country_prefix=KEYS.country_slots_prefix, required=required.value if required else "",
            min_idle_seconds="" if min_idle_seconds is None else float(min_idle_seconds), reason=reason,
            fields=pairs)
        if reply.status != "ok":
            raise SlotTransitionRefused(slot_id, reply.status, reply.previous, target.value)
        return TransitionResult(SlotState(reply.previous), reply.outcome)

    @redis_storage_errors()
    def claim(self, slot_id: str, owner: str, worker: str, process_id: int, stale_after_seconds: float) -> str:
        """A host process takes a started slot; returns ok | missing | not_started | owned (then it must exit)."""
        return self.scripts.call("slot_claim", KEYS, {"slot": KEYS.slot(slot_id)}, owner=owner, worker=worker,
                                 process_id=process_id, stale_after_seconds=float(stale_after_seconds)).status

    @redis_storage_errors()
    def heartbeat(self, slot_id: str, owner: str, browser_pid: int | None) -> Orders | None:
        """Refresh the slot's heartbeat; None when the slot is gone or no longer this process's."""
        reply = self.scripts.call("slot_heartbeat", KEYS, {"slot": KEYS.slot(slot_id)}, owner=owner,
                                  browser_pid="" if browser_pid is None else browser_pid)
        if reply.status != "ok":
            return None
        return Orders(SlotState(reply.state), reply.country, reply.retire == "1", reply.next_country)

    @redis_storage_errors()
    def begin_task(self, slot_id: str, owner: str, country: str, raw_message: str, member: str) -> str:
        """PAGE_READY -> RUNNING_SCRAPING_TASK with a popped task (put back if refused); returns the status."""
        return self.scripts.call("slot_begin_task", KEYS,
                                 {"slot": KEYS.slot(slot_id), "browser_tasks": KEYS.browser_tasks(country)},
                                 owner=owner, message=raw_message, member=member).status


@dataclass(frozen=True)
class HostCapacity:
    slots: int
    hosts: int


class SlotHosts:
    """Slot hosts advertise how many slots they can host; MAX_PAGE_SLOTS is capped by the live total."""

    def __init__(self, client: redis.Redis) -> None:
        self.scripts = page_slot_scripts(client)

    @redis_storage_errors()
    def advertise(self, host: str, capacity: int, ttl_seconds: float) -> HostCapacity:
        reply = self.scripts.call("hosts_advertise", KEYS, host=host, capacity=int(capacity),
                                  ttl_seconds=float(ttl_seconds))
        return HostCapacity(reply.live_capacity, reply.live_hosts)

    def withdraw(self, host: str) -> HostCapacity:
        return self.advertise(host, 0, 0)

    def live_capacity(self) -> HostCapacity:
        return self.advertise("", 0, 0)


def slot_counts(records: Iterable[SlotRecord]) -> dict[str, int]:
    """Slots per country once every order is carried out (what the allocator compares with its target)."""
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        country = record.country_after_orders
        if country is not None:
            counts[country] += 1
    return dict(counts)
