"""The three scheduled jobs of the seed: allocation, preparation and idle closing (DESIGN.md section 5).

:class:`PageSlotManager` reads the slot records, the browser-task census and the hosts' live capacity,
decides with the pure functions of :mod:`harvester.pageslots.allocation`, and carries the decision out as
atomic slot changes. Each job returns a :class:`StepReport`: what it changed, and the same as a story
for the log ("SG 5 → 7 slots: +2 created; MY 6 → 4: 2 deleted after their tasks").
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from harvester.errors import redis_storage_errors
from harvester.pageslots.allocation import AllocationPolicy
from harvester.pageslots.bookkeeping import BrowserTaskBook, CountryCensus, country_tasks, task_member
from harvester.pageslots.proxies import ProxyNotConfigured, require_proxy
from harvester.pageslots.registry import (
    KEYS,
    SlotHosts,
    SlotRecord,
    SlotRegistry,
    SlotState,
    SlotTransitionRefused,
    slot_counts,
)
from harvester.settings import HarvesterSettings

if TYPE_CHECKING:
    from harvester.storage import PackageStore

log = logging.getLogger("harvester.pageslots")

# Which slots give way first when a country has too many: no page, then idle pages, then busy ones.
SURRENDER_ORDER = {SlotState.NO_PAGE: 0, SlotState.CLOSING_PAGE: 1, SlotState.PAGE_READY: 2,
                   SlotState.PREPARING_PAGE: 3, SlotState.RUNNING_SCRAPING_TASK: 4}


# What a job may do to a country's slots, in the order its story tells it (a move names the other country).
_CHANGE_STORY = (
    ("created", "+{} created"), ("moved_in", "+{} moved from {}"), ("kept", "{} kept (orders cancelled)"),
    ("deleted", "{} deleted"), ("deleted_after_tasks", "{} deleted after their tasks"),
    ("moved_out", "{} moving to {}"), ("started", "{} started"), ("closed_idle", "{} idle closed"),
    ("reset", "{} reset (process gone)"),
)


@dataclass
class CountryChange:
    """What a job did to one country's slots."""

    country: str
    before: int
    after: int
    created: int = 0
    deleted: int = 0  # deleted at once (they had no page)
    deleted_after_tasks: int = 0  # marked: deleted once their page closes
    moved_in: Counter[str] = field(default_factory=Counter)  # from country -> slots
    moved_out: Counter[str] = field(default_factory=Counter)  # to country -> slots
    kept: int = 0  # orders cancelled: the slot stays
    started: int = 0
    closed_idle: int = 0
    reset: int = 0

    def story(self) -> str:
        parts: list[str] = []
        for name, template in _CHANGE_STORY:
            value = getattr(self, name)
            if isinstance(value, Counter):  # moves, by the other country
                parts += [template.format(amount, country) for country, amount in sorted(value.items())]
            elif value:
                parts.append(template.format(value))
        return f"{self.country} {self.before} → {self.after} slots: {', '.join(parts) or 'unchanged'}"

    @property
    def changed(self) -> bool:
        return any(getattr(self, name) for name, _ in _CHANGE_STORY)


@dataclass
class StepReport:
    """What one job changed, for the DAG's log and XCom and for `harvester slots`."""

    step: str
    changes: dict[str, CountryChange] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def change(self, country: str, before: int = 0, after: int | None = None) -> CountryChange:
        if country not in self.changes:
            self.changes[country] = CountryChange(country, before, before if after is None else after)
        return self.changes[country]

    @property
    def story(self) -> str:
        lines = [change.story() for _, change in sorted(self.changes.items()) if change.changed]
        return "; ".join(lines + self.notes + self.errors) or "nothing to change"

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "story": self.story, "errors": self.errors, "notes": self.notes,
                "figures": self.figures,
                "changes": {country: {**asdict(change), "moved_in": dict(change.moved_in),
                                      "moved_out": dict(change.moved_out)}
                            for country, change in sorted(self.changes.items()) if change.changed}}


SlotStarter = Callable[[str], None]
DeadLetterer = Callable[[list[str], str], int]


class PageSlotManager:
    """Allocation, preparation and idle closing over the slot records in Redis."""

    def __init__(self, client: redis.Redis, settings: HarvesterSettings,
                 start_slot: SlotStarter | None = None, dead_letter: DeadLetterer | None = None) -> None:
        self.redis = client
        self.settings = settings
        self.policy = AllocationPolicy.from_settings(self.settings)  # the allocation numbers, read once
        self.registry = SlotRegistry(client)
        self.hosts = SlotHosts(client)
        self.book = BrowserTaskBook(client, self.policy.sample_size)
        self._start_slot = start_slot
        self._dead_letter = dead_letter

    # -- what the sensor asks --------------------------------------------------------------------------
    @redis_storage_errors()
    def has_work(self) -> bool:
        """Browser work waiting or running, slots with a page, or slot records to reconcile."""
        census = self.book.census()
        if any(country.active for country in census.values()):
            return True
        if self.registry.redis.scard(KEYS.all_slots) > 0:
            return True
        return any(self.redis.llen(key) for key in self._task_list_keys())

    def _task_list_keys(self) -> list[str]:
        return [key.decode() if isinstance(key, bytes) else key
                for key in self.redis.scan_iter(match=f"{KEYS.browser_tasks_prefix}*", count=500)]

    def queued_countries(self) -> dict[str, int]:
        """Countries with admitted browser tasks waiting in their list, and how many."""
        prefix = KEYS.browser_tasks_prefix
        keys = self._task_list_keys()
        pipeline = self.redis.pipeline(transaction=False)
        for key in keys:
            pipeline.llen(key)
        return {key[len(prefix):]: int(length) for key, length in zip(keys, pipeline.execute(), strict=True)
                if int(length)}

    # -- allocation ------------------------------------------------------------------------------------
    def effective_max_page_slots(self) -> tuple[int, int]:
        """(MAX_PAGE_SLOTS capped by the live capacity of the slot hosts, that capacity)."""
        capacity = self.hosts.live_capacity().slots
        return self.policy.effective_max_page_slots(capacity), capacity

    def unproxied_countries(self, countries: set[str]) -> set[str]:
        missing = set()
        for country in countries:
            try:
                require_proxy(country, self.settings.page_slot_allow_direct_connections)
            except ProxyNotConfigured:
                missing.add(country)
        return missing

    def allocate(self) -> StepReport:
        """Reset dead slots, dead-letter work no proxy can serve, then create, move and delete slot
        records so each country has round(max x score / total) (never more than the max in all)."""
        report = StepReport("allocate_page_slots")
        self.reset_dead_slots(report)
        census = self.book.census()
        queued = self.queued_countries()
        records = self.registry.slots()
        countries = set(census) | set(queued) | {r.country for r in records} | {r.next_country for r in records
                                                                               if r.next_country}
        unproxied = self.unproxied_countries({c for c in countries
                                              if c in queued or (c in census and census[c].active)})
        for country in sorted(unproxied):
            self.refuse_unproxied(country, report)
        census = self.book.census() if unproxied else census
        maximum, capacity = self.effective_max_page_slots()
        tasks = {country: country_tasks(census.get(country, CountryCensus())) for country in sorted(countries)}
        for country in unproxied:
            tasks[country] = country_tasks(CountryCensus())
        desired = self.policy.allocate_tasks(tasks, capacity)
        report.figures = {"max_page_slots": self.policy.max_page_slots, "live_capacity": capacity,
                          "effective_max": maximum, "desired": desired,
                          "scores": {c: t.score for c, t in tasks.items()},
                          "census": {c: asdict(v) for c, v in sorted(census.items())}}
        self._reconcile(records, desired, report)
        self._save_decision(report)
        self._log(report)
        return report

    def _reconcile(self, records: list[SlotRecord], desired: dict[str, int], report: StepReport) -> None:
        have = slot_counts(records)
        for country in set(have) | set(desired):
            report.change(country, have.get(country, 0), have.get(country, 0))
        deficits = {c: desired.get(c, 0) - have.get(c, 0) for c in desired if desired.get(c, 0) > have.get(c, 0)}
        # 1. Slots of a country that needs them back, whose orders would take them away: cancel the orders.
        for record in records:
            country = record.country
            if deficits.get(country, 0) > 0 and record.country_after_orders != country:
                outcome = self._reassign(record, country)
                if outcome == "kept":
                    deficits[country] -= 1
                    change = report.change(country)
                    change.kept += 1
                    change.after += 1
                    if record.next_country:
                        report.change(record.next_country).after -= 1
        records = self.registry.slots()
        have = slot_counts(records)
        surplus: list[SlotRecord] = []
        for country, count in have.items():
            extra = count - desired.get(country, 0)
            if extra > 0:
                mine = sorted((r for r in records if r.country_after_orders == country),
                              key=lambda r: (SURRENDER_ORDER[r.state], r.last_used or 0.0, r.id))
                surplus += mine[:extra]
        # 2. Move surplus slots to countries short of slots; 3. delete the rest; 4. create what is missing.
        for country in sorted(deficits, key=lambda c: (-deficits[c], c)):
            while deficits[country] > 0 and surplus:
                record = surplus.pop(0)
                origin = record.country_after_orders or record.country
                outcome = self._reassign(record, country)
                if outcome in ("moved", "moving"):
                    deficits[country] -= 1
                    report.change(country).moved_in[origin] += 1
                    report.change(country).after += 1
                    report.change(origin).moved_out[country] += 1
                    report.change(origin).after -= 1
        for record in surplus:
            country = record.country_after_orders or record.country
            outcome = self._reassign(record, None)
            change = report.change(country)
            if outcome == "deleted":
                change.deleted += 1
                change.after -= 1
            elif outcome == "retiring":
                change.deleted_after_tasks += 1
                change.after -= 1
        for country, missing in sorted(deficits.items()):
            if missing > 0:
                created = self.registry.create(country, missing)
                report.change(country).created += len(created)
                report.change(country).after += len(created)

    def _reassign(self, record: SlotRecord, country: str | None) -> str:
        outcome = self.registry.reassign(record.id, country)
        log.debug("slot %s (%s, %s) -> %s: %s", record.id, record.country, record.state, country, outcome)
        return outcome

    def reset_dead_slots(self, report: StepReport) -> list[str]:
        """Slots whose process missed two heartbeats go back to NO_PAGE (their tasks return by their leases)."""
        stale_after = 2 * self.settings.page_slot_heartbeat_seconds
        reset = self.registry.reset_stale(stale_after, self.settings.page_slot_claim_seconds)
        for slot in reset:
            country = slot.id.split("-")[0]
            report.change(country).reset += 1
            report.notes.append(f"slot {slot.id} reset from {slot.previous} (no heartbeat for {stale_after:g}s, "
                                f"worker {slot.worker or '?'} pid {slot.process_id or '?'})")
        return [slot.id for slot in reset]

    def refuse_unproxied(self, country: str, report: StepReport) -> int:
        """A country with browser work and no proxy: a clear error, and its queued tasks dead-lettered."""
        reason = str(ProxyNotConfigured(country))
        raw_messages: list[str] = []
        key = KEYS.browser_tasks(country)
        while True:
            batch = self.redis.lpop(key, 500)
            if not batch:
                break
            raw_messages += [raw.decode() if isinstance(raw, bytes) else raw for raw in batch]
        dead = self._dead_letter(raw_messages, reason) if (raw_messages and self._dead_letter) else 0
        if raw_messages and self._dead_letter is None:
            dead = dead_letter_tasks(self.redis, self.settings, raw_messages, reason)
        members = []
        for raw in raw_messages:
            message = json.loads(raw)
            members.append(task_member(message.get("source", ""), message.get("task_id", "")))
        self.book.completed(members)
        report.errors.append(f"{reason} ({dead} queued tasks dead-lettered)")
        log.error("%s (%d queued tasks dead-lettered)", reason, dead)
        return dead

    def _save_decision(self, report: StepReport) -> None:
        seconds, microseconds = self.redis.time()
        document = {"at": seconds + microseconds / 1e6, **report.as_dict()}
        self.redis.set(KEYS.last_decision, json.dumps(document, default=str))

    def last_decision(self) -> dict[str, Any] | None:
        return last_decision(self.redis)

    # -- preparation -----------------------------------------------------------------------------------
    def prepare(self) -> StepReport:
        """Per country start min(slots, ceil(active tasks / MIN_SCRAPING_TASKS_BY_PAGESLOT)) slots, exactly:
        NO_PAGE -> PREPARING_PAGE, and a slot host process is asked to open the page."""
        report = StepReport("prepare_page_slots")
        census = self.book.census()
        records = [r for r in self.registry.slots() if not r.leaving]
        by_country: dict[str, list[SlotRecord]] = defaultdict(list)
        for record in records:
            by_country[record.country].append(record)
        counts = {country: len(slots) for country, slots in by_country.items()}
        active = {country: census.get(country, CountryCensus()).active for country in counts}
        minimum = self.policy.min_scraping_tasks_by_page_slot
        targets = self.policy.to_start(counts, active)
        unproxied = self.unproxied_countries({c for c, n in targets.items() if n})
        report.figures = {"slots": counts, "active_tasks": active, "started_target": targets,
                          "min_scraping_tasks_by_pageslot": str(minimum)}
        for country, target in sorted(targets.items()):
            slots = by_country[country]
            change = report.change(country, len(slots))
            if country in unproxied:
                report.errors.append(str(ProxyNotConfigured(country)))
                continue
            running = sum(1 for r in slots if r.state != SlotState.NO_PAGE)
            idle = sorted((r for r in slots if r.state == SlotState.NO_PAGE), key=lambda r: r.id)
            for record in idle[:max(0, target - running)]:
                try:
                    self.registry.transition(record.id, SlotState.PREPARING_PAGE, required=SlotState.NO_PAGE,
                                             reason="started by prepare_page_slots")
                except SlotTransitionRefused as refused:
                    report.notes.append(f"slot {record.id} not started: {refused.status}")
                    continue
                try:
                    self._start(record.id)
                except Exception as error:  # the broker is down: the slot goes back, the next run retries
                    self.registry.transition(record.id, SlotState.NO_PAGE, required=SlotState.PREPARING_PAGE,
                                             reason=f"could not ask a slot host: {error}")
                    report.errors.append(f"slot {record.id}: could not ask a slot host ({type(error).__name__}: "
                                         f"{error})")
                    continue
                change.started += 1
        self._log(report)
        return report

    def _start(self, slot_id: str) -> None:
        if self._start_slot is None:
            self._start_slot = celery_slot_starter(self.settings)
        self._start_slot(slot_id)

    # -- idle closing ----------------------------------------------------------------------------------
    def close_idle(self) -> StepReport:
        """A ready slot unused for ``page_slot_idle_seconds`` goes CLOSING_PAGE; its host closes the browser
        and lands it in NO_PAGE (the check of idleness is inside the atomic transition)."""
        report = StepReport("close_idle_page_slots")
        idle = self.settings.page_slot_idle_seconds
        for record in self.registry.slots():
            if record.state != SlotState.PAGE_READY:
                continue
            try:
                self.registry.transition(record.id, SlotState.CLOSING_PAGE, required=SlotState.PAGE_READY,
                                         min_idle_seconds=idle, reason=f"idle for {idle:g}s")
            except SlotTransitionRefused:
                continue
            report.change(record.country, 1, 1).closed_idle += 1
        self._log(report)
        return report

    @staticmethod
    def _log(report: StepReport) -> None:
        for error in report.errors:
            log.error("%s: %s", report.step, error)
        log.info("%s: %s", report.step, report.story)


def last_decision(client: redis.Redis) -> dict[str, Any] | None:
    """The allocator's last decision (slots per country and why), or None before its first run."""
    raw = client.get(KEYS.last_decision)
    return json.loads(raw) if raw else None


def celery_slot_starter(settings: HarvesterSettings) -> SlotStarter:
    """Ask a slot host for a slot: the long-running ``harvester.host_page_slot`` task on the pageslots queue."""
    from harvester.distributor import celery_app_for
    from harvester.queues import PAGESLOTS_QUEUE

    app = celery_app_for(settings)

    def start(slot_id: str) -> None:
        app.send_task(HOST_TASK, args=[slot_id], queue=PAGESLOTS_QUEUE)

    return start


HOST_TASK = "harvester.host_page_slot"
DEAD_LETTER_CHUNK = 1000  # tasks dead-lettered per round trip when a country's backlog is refused


def dead_letter_tasks(client: redis.Redis, settings: HarvesterSettings, raw_messages: list[str], reason: str) -> int:
    """Dead-letter admitted tasks with ``reason`` and count them down in their packages as failed: a country's
    whole backlog in a few round trips (``DEAD_LETTER_CHUNK`` tasks each) and one count-down per run and chunk."""
    from harvester.distributor import DeadLettering, RateLimitStore, TaskEnding

    packages: list[PackageStore] = []

    def package_store() -> PackageStore:  # MongoDB only once a task of a run is dead
        if not packages:
            from harvester.connections import mongo_client
            from harvester.storage import PackageStore

            packages.append(PackageStore(mongo_client(settings=settings)[settings.mongo_database]))
        return packages[0]

    dead_lettering = DeadLettering(RateLimitStore(client, settings), package_store)
    dead = 0
    for start in range(0, len(raw_messages), DEAD_LETTER_CHUNK):
        endings = [TaskEnding.rejection(json.loads(raw)["source"], raw, reason)
                   for raw in raw_messages[start:start + DEAD_LETTER_CHUNK]]
        dead += dead_lettering.end(endings).count("dead")
    return dead
