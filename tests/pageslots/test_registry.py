"""Slot records in a real Redis: every state transition, the refusals, claims, orders, resets, capacity."""

from __future__ import annotations

import itertools
import time

import pytest
import redis
from harvester.pageslots.bookkeeping import BrowserTaskBook, task_member
from harvester.pageslots.registry import (
    LEGAL_TRANSITIONS,
    SlotHosts,
    SlotRegistry,
    SlotState,
    SlotTransitionRefused,
    slot_counts,
)
from harvester.redis_keys import PageSlotKeys

pytestmark = pytest.mark.integration
KEYS = PageSlotKeys()
S = SlotState


def slot_in(registry: SlotRegistry, state: SlotState, country: str = "SG", owner: str = "host:1:a") -> str:
    """A slot driven to ``state`` along the legal path (the owner claims it once it is started)."""
    [slot_id] = registry.create(country, 1)
    path = {S.NO_PAGE: [], S.PREPARING_PAGE: [S.PREPARING_PAGE], S.PAGE_READY: [S.PREPARING_PAGE, S.PAGE_READY],
            S.RUNNING_SCRAPING_TASK: [S.PREPARING_PAGE, S.PAGE_READY, S.RUNNING_SCRAPING_TASK],
            S.CLOSING_PAGE: [S.PREPARING_PAGE, S.PAGE_READY, S.CLOSING_PAGE]}[state]
    for step in path:
        registry.transition(slot_id, step, owner if step != S.PREPARING_PAGE else "")
        if step == S.PREPARING_PAGE:
            assert registry.claim(slot_id, owner, "pageslots@machine", 1, 10) == "ok"
    return slot_id


def test_a_new_slot_has_every_field_and_is_indexed_per_country(redis_client: redis.Redis) -> None:
    registry = SlotRegistry(redis_client)
    ids = registry.create("SG", 2) + registry.create("MY", 1)
    assert ids == ["SG-1", "SG-2", "MY-3"]
    record = registry.get("SG-1")
    assert record is not None and record.state == S.NO_PAGE and record.country == "SG"
    assert record.pages_served == 0 and record.consecutive_failures == 0 and record.worker == ""
    assert record.process_id is None and record.browser_pid is None and record.last_used is not None
    assert {m.decode() for m in redis_client.smembers(KEYS.country_slots("SG"))} == {"SG-1", "SG-2"}
    assert slot_counts(registry.slots()) == {"SG": 2, "MY": 1}


@pytest.mark.parametrize("source", list(SlotState))
@pytest.mark.parametrize("target", list(SlotState))
def test_every_transition_is_allowed_exactly_as_the_seed_says(redis_client: redis.Redis, source: SlotState,
                                                              target: SlotState) -> None:
    registry = SlotRegistry(redis_client)
    slot_id = slot_in(registry, source)
    if target in LEGAL_TRANSITIONS[source]:
        result = registry.transition(slot_id, target, "" if source == S.NO_PAGE else "host:1:a")
        assert result.previous == source and result.outcome == target.value
        assert registry.get(slot_id).state == target  # type: ignore[union-attr]
    else:
        with pytest.raises(SlotTransitionRefused) as refused:
            registry.transition(slot_id, target, "host:1:a")
        assert refused.value.status == "illegal"
        assert registry.get(slot_id).state == source  # type: ignore[union-attr]


def test_the_legal_table_is_the_seed_path_plus_its_retries() -> None:
    path = [S.NO_PAGE, S.PREPARING_PAGE, S.PAGE_READY, S.RUNNING_SCRAPING_TASK]
    for before, after in itertools.pairwise(path):
        assert after in LEGAL_TRANSITIONS[before]
    assert S.PAGE_READY in LEGAL_TRANSITIONS[S.RUNNING_SCRAPING_TASK]  # ⇄
    assert S.CLOSING_PAGE in LEGAL_TRANSITIONS[S.RUNNING_SCRAPING_TASK]  # a blocked task
    assert S.CLOSING_PAGE in LEGAL_TRANSITIONS[S.PAGE_READY]  # idle
    assert LEGAL_TRANSITIONS[S.CLOSING_PAGE] == {S.NO_PAGE}
    assert LEGAL_TRANSITIONS[S.NO_PAGE] == {S.PREPARING_PAGE}  # only preparation starts a slot
    assert S.NO_PAGE in LEGAL_TRANSITIONS[S.PREPARING_PAGE]  # 7 failures: back to NO_PAGE


def test_another_process_cannot_drive_a_slot_and_a_slot_runs_in_one_process(redis_client: redis.Redis) -> None:
    registry = SlotRegistry(redis_client)
    slot_id = slot_in(registry, S.PAGE_READY, owner="host:1:a")
    with pytest.raises(SlotTransitionRefused) as refused:
        registry.transition(slot_id, S.RUNNING_SCRAPING_TASK, "host:2:b")
    assert refused.value.status == "not_owner"
    assert registry.heartbeat(slot_id, "host:2:b", None) is None
    orders = registry.heartbeat(slot_id, "host:1:a", 4242)
    assert orders is not None and orders.state == S.PAGE_READY and not orders.leaving
    assert registry.get(slot_id).browser_pid == 4242  # type: ignore[union-attr]
    # a redelivered host task finds the slot owned and fresh: refused; not started: refused
    registry.transition(slot_id, S.CLOSING_PAGE, "host:1:a")
    registry.transition(slot_id, S.NO_PAGE, "host:1:a")
    assert registry.claim(slot_id, "host:2:b", "pageslots@machine", 2, 10) == "not_started"
    registry.transition(slot_id, S.PREPARING_PAGE)
    assert registry.claim(slot_id, "host:2:b", "pageslots@machine", 2, 10) == "ok"
    assert registry.claim(slot_id, "host:3:c", "pageslots@machine", 3, 10) == "owned"
    assert registry.claim("nope", "host:3:c", "pageslots@machine", 3, 10) == "missing"


def test_landing_in_no_page_clears_the_process_and_failures(redis_client: redis.Redis) -> None:
    registry = SlotRegistry(redis_client)
    slot_id = slot_in(registry, S.PREPARING_PAGE)
    registry.transition(slot_id, S.PREPARING_PAGE, "host:1:a", fields={"consecutive_failures": "+1"})
    registry.transition(slot_id, S.PREPARING_PAGE, "host:1:a", fields={"consecutive_failures": "+1"})
    assert registry.get(slot_id).consecutive_failures == 2  # type: ignore[union-attr]
    registry.transition(slot_id, S.NO_PAGE, "host:1:a", reason="gave up after 7 consecutive failed loads")
    record = registry.get(slot_id)
    assert record is not None and record.state == S.NO_PAGE and record.owner == "" and record.worker == ""
    assert record.consecutive_failures == 0 and "gave up" in record.reason


def test_idle_closing_is_refused_for_a_recently_used_slot(redis_client: redis.Redis) -> None:
    registry = SlotRegistry(redis_client)
    slot_id = slot_in(registry, S.PAGE_READY)
    with pytest.raises(SlotTransitionRefused) as refused:
        registry.transition(slot_id, S.CLOSING_PAGE, required=S.PAGE_READY, min_idle_seconds=30)
    assert refused.value.status == "not_idle"
    time.sleep(0.3)
    registry.transition(slot_id, S.CLOSING_PAGE, required=S.PAGE_READY, min_idle_seconds=0.2)
    with pytest.raises(SlotTransitionRefused) as again:
        registry.transition(slot_id, S.NO_PAGE, required=S.PAGE_READY)  # legal from CLOSING_PAGE, not required
    assert again.value.status == "not_in_state"


def test_beginning_a_task_marks_it_running_and_a_slot_that_may_not_puts_it_back(redis_client: redis.Redis) -> None:
    registry = SlotRegistry(redis_client)
    book = BrowserTaskBook(redis_client)
    member = task_member("demo", "t1")
    book.pending([(member, "SG")])
    slot_id = slot_in(registry, S.PAGE_READY)
    assert registry.begin_task(slot_id, "host:1:a", "SG", '{"task_id":"t1"}', member) == "ok"
    assert registry.get(slot_id).state == S.RUNNING_SCRAPING_TASK  # type: ignore[union-attr]
    assert book.census()["SG"].running == 1
    # a second task while running: refused and put back at the head of the list
    assert registry.begin_task(slot_id, "host:1:a", "SG", '{"task_id":"t2"}', "demo|t2") == "not_ready"
    assert redis_client.lrange(KEYS.browser_tasks("SG"), 0, -1) == [b'{"task_id":"t2"}']
    registry.transition(slot_id, S.PAGE_READY, "host:1:a", fields={"pages_served": "+1"})
    assert registry.reassign(slot_id, None) == "retiring"
    assert registry.begin_task(slot_id, "host:1:a", "SG", '{"task_id":"t3"}', "demo|t3") == "leaving"
    book.completed([member])
    assert book.census()["SG"].completed == 1


def test_deleting_and_moving_a_busy_slot_waits_for_its_page_to_close(redis_client: redis.Redis) -> None:
    registry = SlotRegistry(redis_client)
    [idle] = registry.create("SG", 1)
    assert registry.reassign(idle, "MY") == "moved"
    assert registry.get(idle).country == "MY"  # type: ignore[union-attr]
    assert {m.decode() for m in redis_client.smembers(KEYS.country_slots("MY"))} == {idle}
    assert registry.reassign(idle, None) == "deleted" and registry.get(idle) is None

    busy = slot_in(registry, S.RUNNING_SCRAPING_TASK)
    assert registry.reassign(busy, "MY") == "moving"
    assert slot_counts(registry.slots()) == {"MY": 1}
    orders = registry.heartbeat(busy, "host:1:a", None)
    assert orders is not None and orders.next_country == "MY" and orders.leaving
    registry.transition(busy, S.PAGE_READY, "host:1:a")  # its task finished
    registry.transition(busy, S.CLOSING_PAGE, "host:1:a")
    assert registry.transition(busy, S.NO_PAGE, "host:1:a").outcome == "moved"
    record = registry.get(busy)
    assert record is not None and record.country == "MY" and record.state == S.NO_PAGE and not record.leaving

    doomed = slot_in(registry, S.PAGE_READY)
    assert registry.reassign(doomed, None) == "retiring"
    assert registry.reassign(doomed, "SG") == "kept"  # needed again: the order is cancelled
    assert registry.reassign(doomed, None) == "retiring"
    registry.transition(doomed, S.CLOSING_PAGE, "host:1:a")
    assert registry.transition(doomed, S.NO_PAGE, "host:1:a").outcome == "deleted"
    assert registry.get(doomed) is None
    assert not redis_client.sismember(KEYS.country_slots("SG"), doomed)


def test_a_slot_that_stops_heartbeating_is_reset(redis_client: redis.Redis) -> None:
    registry = SlotRegistry(redis_client)
    alive = slot_in(registry, S.PAGE_READY, owner="host:1:a")
    dead = slot_in(registry, S.RUNNING_SCRAPING_TASK, owner="host:2:b")
    registry.heartbeat(dead, "host:2:b", 999)
    time.sleep(0.6)
    registry.heartbeat(alive, "host:1:a", None)
    [reset] = registry.reset_stale(0.5)
    assert reset.id == dead and reset.previous == S.RUNNING_SCRAPING_TASK and reset.browser_pid == 999
    assert reset.worker == "pageslots@machine" and reset.outcome == "NO_PAGE"
    record = registry.get(dead)
    assert record is not None and record.state == S.NO_PAGE and "heartbeat" in record.reason
    assert registry.get(alive).state == S.PAGE_READY  # type: ignore[union-attr]


def test_hosts_advertise_capacity_with_a_heartbeat(redis_client: redis.Redis) -> None:
    hosts = SlotHosts(redis_client)
    assert hosts.live_capacity().slots == 0
    assert hosts.advertise("a", 4, 30).slots == 4
    assert hosts.advertise("b", 2, 0.3).slots == 6
    time.sleep(0.5)
    capacity = hosts.live_capacity()
    assert capacity.slots == 4 and capacity.hosts == 1  # b stopped heartbeating
    assert hosts.withdraw("a").slots == 0


def test_bookkeeping_keeps_only_the_most_recent_sample(redis_client: redis.Redis) -> None:
    book = BrowserTaskBook(redis_client, sample_size=5)
    book.pending([(f"s|{i}", "SG") for i in range(4)])
    book.completed(["s|0", "s|1"])
    book.pending([(f"s|{i}", "MY") for i in range(4, 7)])
    census = book.census()
    assert sum(c.pending + c.running + c.completed for c in census.values()) == 5
    assert census["MY"].pending == 3 and census["SG"].completed == 0 and census["SG"].pending == 2  # 0, 1 trimmed
    assert redis_client.zcard(KEYS.recent_tasks) == 5 and redis_client.hlen(KEYS.recent_task_states) == 5
