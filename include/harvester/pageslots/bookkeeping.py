"""The allocator's view of browser work (kept by the distributor and the slots: ``harvester.distributor.
browser_tasks``), turned into what allocation scores."""

from __future__ import annotations

from harvester.distributor.browser_tasks import BrowserTaskBook, CountryCensus, census_of, task_member
from harvester.pageslots.allocation import CountryTasks

__all__ = ["BrowserTaskBook", "CountryCensus", "census_of", "country_tasks", "task_member"]


def country_tasks(census: CountryCensus) -> CountryTasks:
    """Allocation scores every task not completed as pending (the seed's ``isCompleted() ? 10 : 30``)."""
    return CountryTasks(pending=census.active, completed=census.completed,
                        oldest_pending_wait_seconds=census.oldest_pending_wait_seconds)
