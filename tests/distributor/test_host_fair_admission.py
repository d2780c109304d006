"""Host-fair admission on a real redis-server: one source over many hosts, its intake ordered host by host.

A broad harvest pushes a site's pages together, so intake reads host after host. Admission must still take
the hosts in turn (round-robin, not the first few hosts' pages while the rest wait) and must never admit a
task before its host allows it (``per_host_max_active`` in flight, ``per_host_per_minute`` spacing): such a
task would only sleep in its worker, holding one of the source's ``max_active`` places.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import pairwise

import pytest
import redis
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.distributor.hosts import host_of
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source
from tests.distributor.helpers import held_messages, leases_of

pytestmark = pytest.mark.integration

HOSTS = 300
PAGES = 6


def host_ordered(source: str, run_id: str = "run-1") -> list[TaskMessage]:
    """Every page of the first host, then every page of the next: how a broad input is usually written."""
    return [TaskMessage(source=source, url=f"http://site{host:03d}.test/page/{page}", run_id=run_id)
            for host in range(HOSTS) for page in range(PAGES)]


def finish(store: RateLimitStore, source: str, messages: list[TaskMessage], now: float) -> None:
    """What a worker does with admitted tasks: start them, then release them (output stored)."""
    leases = leases_of(*messages)
    store.mark_published(source, leases, now=now)
    store.start(source, leases, now=now)
    store.release(source, leases)


def test_a_host_ordered_intake_is_admitted_round_robin_and_no_host_early(
        redis_client: redis.Redis, settings: HarvesterSettings):
    per_host_per_minute = 2
    source = make_source("broad", rate_limit={"max_active": 400, "per_minute": 100_000, "per_host_max_active": 1,
                                              "per_host_per_minute": per_host_per_minute})
    Intake(redis_client, settings).push(source, host_ordered("broad"))
    store = RateLimitStore(redis_client, settings)
    spacing = (settings.rate_window_seconds + settings.rate_window_margin_seconds) / per_host_per_minute
    start = store.server_time()

    admitted_at: dict[str, list[float]] = defaultdict(list)
    rounds: list[list[str]] = []
    now = start
    calls = 0
    while sum(map(len, admitted_at.values())) < HOSTS * PAGES:
        calls += 1
        assert calls < 400, "admission stalled"
        admission = store.admit("broad", 100, now=now)
        messages = held_messages(admission)
        hosts = [host_of(message.url) for message in messages]
        assert len(hosts) == len(set(hosts)), "a host had two tasks in flight at once"
        for host in hosts:
            admitted_at[host].append(now)
        if messages:
            rounds.append(hosts)
            finish(store, "broad", messages, now)
        else:
            assert admission.status == "host_limit"
            assert admission.wait_seconds is not None and 0 < admission.wait_seconds <= spacing + 1e-6
            now += admission.wait_seconds  # the time the next host may take a task, as admission says

    # no host was given a task before its spacing was over
    for host, times in admitted_at.items():
        gaps = [later - earlier for earlier, later in pairwise(times)]
        assert all(gap >= spacing - 1e-6 for gap in gaps), (host, gaps)
    # every host got its first page before any host got its second, and so on: round-robin over hosts
    order = [host for hosts in rounds for host in hosts]
    seen: Counter[str] = Counter()
    for position, host in enumerate(order):
        seen[host] += 1
        turn = (position // HOSTS) + 1
        assert seen[host] == turn, f"{host} had page {seen[host]} at position {position}, turn {turn}"
    # the hosts' queues are empty and counted as such
    assert store.stats(["broad"])["broad"].pending == 0
    assert redis_client.zcard(SourceKeys("broad").host_ready) == 0
    assert redis_client.get(SourceKeys("broad").host_parked) is None


def test_a_host_ordered_intake_reaches_every_host_beyond_the_scan(
        redis_client: redis.Redis, settings: HarvesterSettings):
    """Rotating a blocked host's tasks behind the others looked at room * 4 + 16 tasks a call: with six pages a
    host, that is a few hosts a call while hundreds wait. Queued by host instead, every host is in flight after
    a few calls, and queued tasks stay visible (pending, a run's live tasks)."""
    source = make_source("broad", rate_limit={"max_active": 400, "per_minute": 100_000, "per_host_max_active": 1})
    Intake(redis_client, settings).push(source, host_ordered("broad"))
    store = RateLimitStore(redis_client, settings)

    hosts: list[str] = []
    for _ in range(3):
        hosts += [host_of(message.url) for message in held_messages(store.admit("broad", 100))]
    assert len(hosts) == HOSTS and len(set(hosts)) == HOSTS  # one page of each host, every host
    blocked = store.admit("broad", 100)
    assert (blocked.status, blocked.messages, blocked.wait_seconds) == ("host_limit", [], None)  # a release wakes it
    assert blocked.pending == HOSTS * (PAGES - 1)
    assert store.stats(["broad"])["broad"].pending == HOSTS * (PAGES - 1)
    assert len(store.live_task_ids("broad", "run-1")) == HOSTS * PAGES  # queued, reserved: all still live


def test_a_paused_host_waits_in_its_queue_and_the_others_go_on(
        redis_client: redis.Redis, settings: HarvesterSettings):
    """A host paused by Retry-After keeps its tasks in its queue until the pause is over, without a host limit."""
    source = make_source("broad", rate_limit={"max_active": 100, "per_minute": 100_000})
    Intake(redis_client, settings).push(source, host_ordered("broad")[:3 * PAGES])
    store = RateLimitStore(redis_client, settings)
    start = store.server_time()
    store.pause_host("broad", "site000.test", 5, now=start)

    first = held_messages(store.admit("broad", 100, now=start))
    assert sorted({host_of(message.url) for message in first}) == ["site001.test", "site002.test"]
    waiting = store.admit("broad", 100, now=start + 1)
    assert waiting.status == "host_limit" and waiting.wait_seconds == pytest.approx(4, abs=1e-3)
    after = held_messages(store.admit("broad", 100, now=start + 5.01))
    assert [message.url for message in after] == [f"http://site000.test/page/{page}" for page in range(PAGES)]
