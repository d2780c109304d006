"""How many page slots each country gets, and how many of them to start (seed 000, DESIGN.md section 5).

Pure functions over counts, so the scheduled job, the tests and the UI compute the same figures.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from harvester.settings import HarvesterSettings

PENDING_TASK_SCORE = 30
COMPLETED_TASK_SCORE = 10


@dataclass(frozen=True)
class CountryTasks:
    """What the allocation job sees of one country's most recent scraping tasks."""

    pending: int = 0
    completed: int = 0
    oldest_pending_wait_seconds: float = 0.0

    @property
    def score(self) -> int:
        return PENDING_TASK_SCORE * self.pending + COMPLETED_TASK_SCORE * self.completed


def round_half_up(value: Fraction) -> int:
    """JavaScript's Math.round, which the seed uses (Python's round() rounds half to even)."""
    return math.floor(value + Fraction(1, 2))


def allocate_page_slots(
    tasks_by_country: Mapping[str, CountryTasks],
    max_page_slots: int,
    starving_after_seconds: float = 50.0,
) -> dict[str, int]:
    """Slots per country = round(max x score / total), never more than ``max_page_slots`` in all.

    A country whose pending tasks have waited longer than ``starving_after_seconds`` gets one slot
    even when its share rounds to zero, taken from the country with the most slots if needed.
    """
    total = sum(tasks.score for tasks in tasks_by_country.values())
    if total == 0 or max_page_slots <= 0:
        return dict.fromkeys(tasks_by_country, 0)
    exact = {
        country: Fraction(max_page_slots * tasks.score, total) for country, tasks in tasks_by_country.items()
    }
    slots = {country: round_half_up(share) for country, share in exact.items()}
    while sum(slots.values()) > max_page_slots:
        # Take back from the country that rounding favoured most.
        country = max((c for c in slots if slots[c] > 0), key=lambda c: (slots[c] - exact[c], slots[c], c))
        slots[country] -= 1
    starving = sorted(
        (c for c, tasks in tasks_by_country.items()
         if slots[c] == 0 and tasks.pending > 0 and tasks.oldest_pending_wait_seconds > starving_after_seconds),
        key=lambda c: (-tasks_by_country[c].oldest_pending_wait_seconds, c),
    )
    for country in starving:
        if sum(slots.values()) >= max_page_slots:
            donor = max(slots, key=lambda c: (slots[c], -exact[c], c))
            if slots[donor] <= 1:
                break
            slots[donor] -= 1
        slots[country] = 1
    return slots


def page_slots_to_start(
    slot_counts: Mapping[str, int],
    active_task_counts: Mapping[str, int],
    min_scraping_tasks_by_page_slot: Fraction,
) -> dict[str, int]:
    """Started = min(slot count, ceil(pending+running tasks / MIN_SCRAPING_TASKS_BY_PAGESLOT)), exactly."""
    if min_scraping_tasks_by_page_slot <= 0:
        raise ValueError("min_scraping_tasks_by_page_slot must be positive")
    return {
        country: min(count, math.ceil(Fraction(active_task_counts.get(country, 0)) / min_scraping_tasks_by_page_slot))
        for country, count in slot_counts.items()
        if count > 0
    }


def tasks_by_country_from(recent_tasks: Iterable[tuple[str, bool, float]], cap: int = 3000) -> dict[str, CountryTasks]:
    """Fold at most ``cap`` recent (country, completed, waited_seconds) tuples into per-country counts."""
    pending: dict[str, int] = {}
    completed: dict[str, int] = {}
    oldest: dict[str, float] = {}
    for index, (country, is_completed, waited) in enumerate(recent_tasks):
        if index >= cap:
            break
        pending.setdefault(country, 0)
        completed.setdefault(country, 0)
        if is_completed:
            completed[country] += 1
        else:
            pending[country] += 1
            oldest[country] = max(oldest.get(country, 0.0), waited)
    return {
        country: CountryTasks(pending[country], completed[country], oldest.get(country, 0.0)) for country in pending
    }


@dataclass(frozen=True)
class AllocationPolicy:
    """The allocation and preparation rules with their numbers from settings (Scrapy's ``from_crawler``): the one
    place that reads them; :class:`~harvester.pageslots.manager.PageSlotManager` applies this policy."""

    max_page_slots: int
    min_scraping_tasks_by_page_slot: Fraction
    starving_after_seconds: float
    sample_size: int

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> AllocationPolicy:
        return cls(settings.max_page_slots, Fraction(settings.min_scraping_tasks_by_pageslot),
                   settings.page_slot_starving_seconds, settings.allocation_sample_size)

    def effective_max_page_slots(self, live_capacity: int | None = None) -> int:
        """MAX_PAGE_SLOTS, capped by the live capacity of the slot hosts when it is known."""
        return self.max_page_slots if live_capacity is None else min(self.max_page_slots, live_capacity)

    def allocate_tasks(self, tasks_by_country: Mapping[str, CountryTasks],
                       live_capacity: int | None = None) -> dict[str, int]:
        """Slots per country from each country's recent tasks (what the manager's census gives)."""
        return allocate_page_slots(tasks_by_country, self.effective_max_page_slots(live_capacity),
                                   self.starving_after_seconds)

    def allocate(self, recent_tasks: Iterable[tuple[str, bool, float]]) -> dict[str, int]:
        """Slots per country from the most recent (country, completed, waited_seconds) scraping tasks."""
        return self.allocate_tasks(tasks_by_country_from(recent_tasks, self.sample_size))

    def to_start(self, slot_counts: Mapping[str, int], active_task_counts: Mapping[str, int]) -> dict[str, int]:
        """Slots to start per country, given its slots and its pending+running tasks."""
        return page_slots_to_start(slot_counts, active_task_counts, self.min_scraping_tasks_by_page_slot)
