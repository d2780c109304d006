"""The seed's worked example and one test per rule of page-slot allocation and preparation."""

from __future__ import annotations

from fractions import Fraction

import pytest
from harvester.pageslots.allocation import (
    CountryTasks,
    allocate_page_slots,
    page_slots_to_start,
    round_half_up,
    tasks_by_country_from,
)

pytestmark = pytest.mark.unit

ACTIVE = {"SG": 2, "MY": 2, "PH": 1, "TH": 1, "ID": 0, "VN": 0}
COMPLETED = {"SG": 29, "MY": 24, "PH": 12, "TH": 7, "ID": 10, "VN": 0}
SEED_TASKS = {country: CountryTasks(pending=ACTIVE[country], completed=COMPLETED[country]) for country in ACTIVE}


def test_seed_worked_example_scores() -> None:
    assert {c: t.score for c, t in SEED_TASKS.items()} == {
        "SG": 350, "MY": 300, "PH": 150, "TH": 100, "ID": 100, "VN": 0,
    }


def test_seed_worked_example_allocation_and_preparation() -> None:
    slots = allocate_page_slots(SEED_TASKS, max_page_slots=20)
    assert slots == {"SG": 7, "MY": 6, "PH": 3, "TH": 2, "ID": 2, "VN": 0}
    started = page_slots_to_start(slots, ACTIVE, Fraction(1, 3))
    assert started == {"SG": 6, "MY": 6, "PH": 3, "TH": 2, "ID": 0}


def test_round_half_up_like_javascript() -> None:
    assert round_half_up(Fraction(5, 2)) == 3
    assert round_half_up(Fraction(7, 2)) == 4
    assert round_half_up(Fraction(49, 10)) == 5


def test_total_never_exceeds_the_maximum_when_rounding_goes_up() -> None:
    tasks = {c: CountryTasks(pending=1) for c in ("A", "B", "C")}  # 3 x 1.5 → 2 each would be 6 > 4
    slots = allocate_page_slots(tasks, max_page_slots=4)
    assert sum(slots.values()) <= 4
    assert all(count >= 1 for count in slots.values())


def test_starving_country_gets_a_slot_only_after_the_wait() -> None:
    tasks = {"SG": CountryTasks(completed=1000), "VN": CountryTasks(pending=1, oldest_pending_wait_seconds=10)}
    assert allocate_page_slots(tasks, max_page_slots=5)["VN"] == 0
    waited = {**tasks, "VN": CountryTasks(pending=1, oldest_pending_wait_seconds=51)}
    slots = allocate_page_slots(waited, max_page_slots=5)
    assert slots["VN"] == 1 and sum(slots.values()) == 5


def test_nothing_to_do_allocates_nothing() -> None:
    assert allocate_page_slots({"SG": CountryTasks()}, max_page_slots=20) == {"SG": 0}


def test_min_tasks_above_one_starts_fewer_slots() -> None:
    assert page_slots_to_start({"SG": 10}, {"SG": 9}, Fraction(4)) == {"SG": 3}


def test_recent_task_sample_is_capped() -> None:
    recent = [("SG", False, 5.0)] * 2000 + [("MY", True, 0.0)] * 2000
    folded = tasks_by_country_from(recent, cap=3000)
    assert folded["SG"].pending == 2000 and folded["MY"].completed == 1000
    assert folded["SG"].oldest_pending_wait_seconds == 5.0


# -- the cap, over random inputs -----------------------------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

country_tasks = st.builds(
    CountryTasks, pending=st.integers(0, 400), completed=st.integers(0, 3000),
    oldest_pending_wait_seconds=st.floats(0, 600, allow_nan=False),
)
inputs = st.dictionaries(st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=2, max_size=2), country_tasks, max_size=50)


@settings(max_examples=400, deadline=None)
@given(tasks=inputs, maximum=st.integers(0, 60), starving=st.floats(0, 120, allow_nan=False))
def test_allocation_never_exceeds_the_maximum_never_negative_and_is_deterministic(
    tasks: dict[str, CountryTasks], maximum: int, starving: float,
) -> None:
    slots = allocate_page_slots(tasks, maximum, starving)
    assert set(slots) == set(tasks)
    assert sum(slots.values()) <= maximum
    assert all(count >= 0 for count in slots.values())
    assert all(slots[c] == 0 for c, t in tasks.items() if t.score == 0)  # no work, no slot
    assert allocate_page_slots(tasks, maximum, starving) == slots
    assert allocate_page_slots(dict(reversed(list(tasks.items()))), maximum, starving) == slots  # order-free


@settings(max_examples=200, deadline=None)
@given(tasks=inputs, maximum=st.integers(1, 60))
def test_a_starving_country_gets_a_slot_while_others_can_spare_one(tasks: dict[str, CountryTasks],
                                                                  maximum: int) -> None:
    slots = allocate_page_slots(tasks, maximum, 50.0)
    starving = [c for c, t in tasks.items() if t.pending and t.oldest_pending_wait_seconds > 50.0]
    for country in starving:
        # either it got a slot, or every slot is taken by countries holding a single slot each
        assert slots[country] >= 1 or (sum(slots.values()) == maximum and max(slots.values()) <= 1)


def test_seed_example_is_unchanged_by_the_starvation_rule() -> None:
    waited = {c: CountryTasks(t.pending, t.completed, 60.0 if t.pending else 0.0) for c, t in SEED_TASKS.items()}
    assert allocate_page_slots(waited, 20) == {"SG": 7, "MY": 6, "PH": 3, "TH": 2, "ID": 2, "VN": 0}


def test_the_policy_caps_the_maximum_by_the_live_capacity_and_allocates_the_census() -> None:
    from harvester.pageslots.allocation import AllocationPolicy

    policy = AllocationPolicy(max_page_slots=8, min_scraping_tasks_by_page_slot=Fraction(1, 3),
                              starving_after_seconds=50.0, sample_size=3000)
    assert (policy.effective_max_page_slots(), policy.effective_max_page_slots(3)) == (8, 3)
    assert policy.allocate_tasks(SEED_TASKS) == allocate_page_slots(SEED_TASKS, 8)
    assert policy.allocate_tasks(SEED_TASKS, live_capacity=3) == allocate_page_slots(SEED_TASKS, 3) != \
        allocate_page_slots(SEED_TASKS, 8)


def test_the_manager_applies_the_policy_built_from_its_settings() -> None:
    import redis
    from harvester.pageslots.allocation import AllocationPolicy
    from harvester.pageslots.manager import PageSlotManager
    from harvester.settings import HarvesterSettings

    settings = HarvesterSettings(max_page_slots=7, min_scraping_tasks_by_pageslot="1/2", page_slot_starving_seconds=9,
                                 allocation_sample_size=11)
    manager = PageSlotManager(redis.Redis(port=1), settings)  # never contacted: building opens no connection
    assert manager.policy == AllocationPolicy.from_settings(settings) == AllocationPolicy(7, Fraction(1, 2), 9.0, 11)
    assert manager.book.sample_size == 11
