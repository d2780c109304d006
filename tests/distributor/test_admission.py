"""The rate-limit store's admission against a real redis-server: limits, fairness inputs, per-host slots."""

from __future__ import annotations

import json
import multiprocessing
import random
import time

import pytest
import redis
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.distributor.hosts import host_of
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings

from tests.distributor.conftest import make_source

pytestmark = pytest.mark.integration


def tasks(source: str, count: int, host: str = "shop.test", **fields: object) -> list[TaskMessage]:
    return [TaskMessage(source=source, url=f"http://{host}/item/{i}", **fields) for i in range(count)]


def test_admits_up_to_max_active_then_waits_for_a_release(redis_client: redis.Redis, settings: HarvesterSettings):
    source = make_source("shop", rate_limit={"max_active": 3, "per_minute": 100})
    Intake(redis_client, settings).push(source, tasks("shop", 10))
    store = RateLimitStore(redis_client, settings)

    first = store.admit("shop", 10)
    assert (first.status, len(first.messages), first.active, first.pending) == ("ok", 3, 3, 7)
    blocked = store.admit("shop", 10)
    assert (blocked.status, blocked.messages) == ("active_limit", [])

    done = [TaskMessage.from_json(raw).task_id for raw in first.messages[:2]]
    assert store.release("shop", done) == 2
    assert store.release("shop", done) == 0  # releasing twice counts once
    again = store.admit("shop", 10)
    assert (again.status, len(again.messages), again.active) == ("ok", 2, 3)
    assert store.counters("shop")["done"] == 2


def test_per_minute_counts_a_rolling_window(redis_client: redis.Redis, settings: HarvesterSettings):
    source = make_source("shop", rate_limit={"max_active": 100, "per_minute": 5})
    Intake(redis_client, settings).push(source, tasks("shop", 20))
    store = RateLimitStore(redis_client, settings)
    start = store.server_time()
    window = settings.rate_window_seconds

    assert len(store.admit("shop", 3, now=start).messages) == 3
    assert len(store.admit("shop", 3, now=start + 0.5).messages) == 2
    limited = store.admit("shop", 3, now=start + 1.0)
    assert limited.status == "rate_limit"
    assert limited.wait_seconds == pytest.approx(window - 1.0, abs=1e-3)
    # the first three leave the window at start + window; the two at +0.5 are still inside
    assert len(store.admit("shop", 10, now=start + window + 0.01).messages) == 3
    assert store.admit("shop", 10, now=start + window + 0.02).status == "rate_limit"
    assert len(store.admit("shop", 10, now=start + window + 0.51).messages) == 2


def _admit_and_release(url: str, seconds: float, seed: int, results: multiprocessing.Queue) -> None:
    """One of several concurrent admitters: admit a few, hold them briefly, release, repeat."""
    client = redis.Redis.from_url(url)
    store = RateLimitStore(client)
    rng = random.Random(seed)
    events: list[tuple[float, int, int]] = []
    held: list[tuple[float, list[str]]] = []
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        admission = store.admit("shop", rng.randint(1, 4))
        if admission.messages:
            events.append((admission.now, len(admission.messages), admission.active))
            held.append((time.monotonic() + rng.uniform(0.01, 0.12),
                         [json.loads(raw)["task_id"] for raw in admission.messages]))
        due = [ids for release_at, ids in held if release_at <= time.monotonic()]
        held = [(release_at, ids) for release_at, ids in held if release_at > time.monotonic()]
        for ids in due:
            store.release("shop", ids)
        time.sleep(rng.uniform(0, 0.005))
    for _, ids in held:
        store.release("shop", ids)
    results.put(events)


def test_limits_hold_exactly_with_eight_concurrent_admitting_processes(
    redis_client: redis.Redis, settings: HarvesterSettings, redis_server
):
    max_active, per_minute, window = 5, 40, settings.rate_window_seconds
    source = make_source("shop", rate_limit={"max_active": max_active, "per_minute": per_minute})
    Intake(redis_client, settings).push(source, tasks("shop", 3000))

    context = multiprocessing.get_context("fork")
    results: multiprocessing.Queue = context.Queue()
    processes = [context.Process(target=_admit_and_release, args=(redis_server.url, 5.0, seed, results))
                 for seed in range(8)]
    for process in processes:
        process.start()
    events = sorted(event for _ in processes for event in results.get(timeout=60))
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0

    assert max(active for _, _, active in events) == max_active  # reached, never passed
    # every admission call saw a window of (t - window, t] holding at most per_minute admissions
    busiest = 0
    for index, (now, _, _) in enumerate(events):
        in_window = sum(count for when, count, _ in events[: index + 1] if when > now - window)
        busiest = max(busiest, in_window)
    assert busiest == per_minute
    total = sum(count for _, count, _ in events)
    assert total == RateLimitStore(redis_client, settings).counters("shop")["admitted"]
    # five seconds of a two-second window of 40: at most 40 per window, and the limit was the bottleneck
    assert per_minute * 2 <= total <= per_minute * 3


def test_malformed_messages_go_to_dead_letters_and_admission_goes_on(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    source = make_source("shop", rate_limit={"max_active": 10, "per_minute": 100})
    intake = Intake(redis_client, settings)
    intake.register_source(source)
    intake.push_raw("shop", ["{not json", json.dumps({"source": "shop", "url": "http://a/"}),
                             json.dumps({"task_id": "x", "source": "other", "url": "http://a/"})])
    intake.push(source, tasks("shop", 2))
    admission = RateLimitStore(redis_client, settings).admit("shop", 10)
    assert (admission.malformed, len(admission.messages)) == (3, 2)
    entries = [json.loads(raw) for raw in redis_client.lrange(SourceKeys("shop").dead_letters, 0, -1)]
    assert entries[0]["message"] == "{not json"
    assert [entry["reason"] for entry in entries] == [
        "malformed message: not a JSON object", "malformed message: task_id missing",
        "malformed message: source is not shop",
    ]


def test_a_task_already_in_flight_is_not_admitted_twice(redis_client: redis.Redis, settings: HarvesterSettings):
    source = make_source("shop", rate_limit={"max_active": 10, "per_minute": 100})
    message = TaskMessage(source="shop", url="http://shop.test/1")
    Intake(redis_client, settings).push(source, [message, message])
    store = RateLimitStore(redis_client, settings)
    assert len(store.admit("shop", 10).messages) == 1
    assert store.counters("shop")["duplicates"] == 1


def test_per_host_limit_keeps_other_hosts_moving(redis_client: redis.Redis, settings: HarvesterSettings):
    source = make_source("shop", rate_limit={"max_active": 10, "per_minute": 100, "per_host_max_active": 2})
    Intake(redis_client, settings).push(source, tasks("shop", 5, host="a.test") + tasks("shop", 3, host="B.test"))
    store = RateLimitStore(redis_client, settings)
    admitted = [TaskMessage.from_json(raw) for raw in store.admit("shop", 10).messages]
    assert sorted(host_of(m.url) for m in admitted) == ["a.test", "a.test", "b.test", "b.test"]
    assert store.admit("shop", 10).status == "host_limit"
    store.release("shop", [m.task_id for m in admitted if host_of(m.url) == "a.test"][:1])
    again = [TaskMessage.from_json(raw) for raw in store.admit("shop", 10).messages]
    assert [host_of(m.url) for m in again] == ["a.test"]
    counts = redis_client.hgetall(SourceKeys("shop").host_active_counts)
    assert counts == {b"a.test": b"2", b"b.test": b"2"}


def test_stats_of_many_sources_in_one_round_trip(redis_client: redis.Redis, settings: HarvesterSettings):
    intake = Intake(redis_client, settings)
    intake.push(make_source("one", rate_limit={"max_active": 2, "per_minute": 100}), tasks("one", 5))
    intake.push(make_source("two", retries=0), tasks("two", 1))
    store = RateLimitStore(redis_client, settings)
    one = store.admit("one", 10)
    store.release("one", [TaskMessage.from_json(one.messages[0]).task_id])
    store.fail(TaskMessage.from_json(store.admit("two", 1).messages[0]), "HTTP 500")
    stats = store.stats(["one", "two", "never"])
    assert (stats["one"].pending, stats["one"].active, stats["one"].admitted_last_minute, stats["one"].done) == (
        3, 1, 2, 1)
    assert (stats["two"].failed, stats["two"].dead, stats["two"].pending) == (1, 1, 0)
    assert stats["never"].pending == 0
    assert set(store.stats_all()) == {"one", "two"}
    assert store.admit("one", 0).messages == []
    store.count_outcomes("one", {"stored": 3, "http_404": 1})
    assert store.counters("one")["outcome:stored"] == 3
