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
from tests.distributor.helpers import (
    MALFORMED_TASK_ID,
    admit_and_start,
    held_messages,
    leases_of,
    push_with_one_malformed,
)

pytestmark = pytest.mark.integration


def tasks(source: str, count: int, host: str = "shop.test", **fields: object) -> list[TaskMessage]:
    return [TaskMessage(source=source, url=f"http://{host}/item/{i}", **fields) for i in range(count)]


def test_admits_up_to_max_active_then_waits_for_a_release(redis_client: redis.Redis, settings: HarvesterSettings):
    source = make_source("shop", rate_limit={"max_active": 3, "per_minute": 100})
    Intake(redis_client, settings).push(source, tasks("shop", 10))
    store = RateLimitStore(redis_client, settings)

    first = store.admit("shop", 10)
    assert (first.status, len(first.messages), first.active, first.pending) == ("ok", 3, 3, 7)
    assert len(set(first.tokens)) == 3  # a fencing token per task and attempt
    blocked = store.admit("shop", 10)
    assert (blocked.status, blocked.messages) == ("active_limit", [])

    done = leases_of(*held_messages(first)[:2])
    store.start("shop", done)
    assert store.release("shop", done) == 2
    assert store.release("shop", done) == 0  # releasing twice counts once
    again = store.admit("shop", 10)
    assert (again.status, len(again.messages), again.active) == ("ok", 2, 3)
    assert store.counters("shop")["done"] == 2


def test_per_minute_counts_fetch_starts_in_a_rolling_window(redis_client: redis.Redis, settings: HarvesterSettings):
    source = make_source("shop", rate_limit={"max_active": 100, "per_minute": 5})
    Intake(redis_client, settings).push(source, tasks("shop", 20))
    store = RateLimitStore(redis_client, settings)
    start = store.server_time()
    window = settings.rate_window_seconds + settings.rate_window_margin_seconds  # a token counts this long

    assert [store.acquire_fetch("shop", now=start) for _ in range(3)] == [0.0] * 3
    assert [store.acquire_fetch("shop", now=start + 0.5) for _ in range(2)] == [0.0] * 2
    assert store.acquire_fetch("shop", now=start + 1.0) == pytest.approx(window - 1.0, abs=1e-3)
    # admission has no room either while the window of fetch starts is full
    limited = store.admit("shop", 3, now=start + 1.0)
    assert limited.status == "rate_limit"
    assert limited.wait_seconds == pytest.approx(window - 1.0, abs=1e-3)
    # the first three leave the window at start + window; the two at +0.5 are still inside
    assert [store.acquire_fetch("shop", now=start + window + 0.01) for _ in range(4)][:3] == [0.0] * 3
    assert store.acquire_fetch("shop", now=start + window + 0.02) > 0
    assert store.acquire_fetch("shop", now=start + window + 0.51) == 0.0


def _fetch_like_a_worker(url: str, settings: HarvesterSettings, seconds: float, seed: int,
                         results: multiprocessing.Queue) -> None:
    """One of several concurrent workers: admit a few, start them, take a rate token per fetch, release."""
    client = redis.Redis.from_url(url)
    store = RateLimitStore(client, settings)
    rng = random.Random(seed)
    starts: list[float] = []
    actives: list[int] = []
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        admission = store.admit("shop", rng.randint(1, 4))
        if not admission.messages:
            time.sleep(rng.uniform(0, 0.005))
            continue
        actives.append(admission.active)
        messages = held_messages(admission)
        store.start("shop", leases_of(*messages))
        for _ in messages:
            while (wait := store.acquire_fetch("shop")) > 0:
                time.sleep(min(wait, 0.05))
            starts.append(store.server_time())
        time.sleep(rng.uniform(0.01, 0.05))
        store.release("shop", leases_of(*messages))
    results.put((starts, actives))


def test_limits_hold_exactly_with_eight_concurrent_worker_processes(
    redis_client: redis.Redis, settings: HarvesterSettings, redis_server
):
    max_active, per_minute, window = 5, 40, settings.rate_window_seconds
    source = make_source("shop", rate_limit={"max_active": max_active, "per_minute": per_minute})
    Intake(redis_client, settings).push(source, tasks("shop", 3000))

    context = multiprocessing.get_context("fork")
    results: multiprocessing.Queue = context.Queue()
    processes = [context.Process(target=_fetch_like_a_worker, args=(redis_server.url, settings, 5.0, seed, results))
                 for seed in range(8)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    starts = sorted(start for process_starts, _ in outcomes for start in process_starts)
    assert max(active for _, actives in outcomes for active in actives) <= max_active
    # any window of the rate window's length holds at most per_minute fetch starts (a start is read from
    # the server clock one round trip after its token: the window margin covers that)
    busiest = max(sum(1 for other in starts[index:] if other < start + window)
                  for index, start in enumerate(starts))
    assert busiest <= per_minute
    assert store_counter(redis_client, settings, "fetch_starts") == len(starts)
    # five seconds of a two-second window (three with its margin) of 40: the limit was the bottleneck
    assert per_minute <= len(starts) <= per_minute * 3


def store_counter(client: redis.Redis, settings: HarvesterSettings, name: str) -> int:
    return RateLimitStore(client, settings).counters("shop").get(name, 0)


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


def test_admitted_messages_parses_each_with_its_token_and_dead_letters_what_is_no_task(
    redis_client: redis.Redis, settings: HarvesterSettings
):
    """The one parser of admitted JSON (the distributor's round, a refilling worker's admission, take_queued):
    what admit.lua passed but is no valid task (a negative depth) is rejected at once, its lease freed."""
    source = make_source("shop", rate_limit={"max_active": 10, "per_minute": 100})
    intake = Intake(redis_client, settings)
    intake.register_source(source)
    good = tasks("shop", 2)
    push_with_one_malformed(intake, "shop", good)
    store = RateLimitStore(redis_client, settings)
    admission = store.admit("shop", 10)
    held = store.admitted_messages("shop", admission.messages, admission.tokens)
    by_task = dict(zip([json.loads(raw)["task_id"] for raw in admission.messages], admission.tokens, strict=True))
    assert [(message.task_id, message.lease_token) for message in held] == [
        (message.task_id, by_task[message.task_id]) for message in good]
    [entry] = [json.loads(raw) for raw in redis_client.lrange(SourceKeys("shop").dead_letters, 0, -1)]
    assert entry["message"]["task_id"] == MALFORMED_TASK_ID and entry["reason"] == (
        "malformed message: depth: Input should be greater than or equal to 0")
    assert store.stats(["shop"])["shop"].active == 2  # the rejected task's reservation was freed


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
    admitted = admit_and_start(store, "shop", 10)
    assert sorted(host_of(m.url) for m in admitted) == ["a.test", "a.test", "b.test", "b.test"]
    assert store.admit("shop", 10).status == "host_limit"
    store.release("shop", leases_of(*[m for m in admitted if host_of(m.url) == "a.test"][:1]))
    again = [TaskMessage.from_json(raw) for raw in store.admit("shop", 10).messages]
    assert [host_of(m.url) for m in again] == ["a.test"]
    counts = redis_client.hgetall(SourceKeys("shop").host_active_counts)
    assert counts == {b"a.test": b"2", b"b.test": b"2"}


def test_stats_of_many_sources_in_one_round_trip(redis_client: redis.Redis, settings: HarvesterSettings):
    intake = Intake(redis_client, settings)
    intake.push(make_source("one", rate_limit={"max_active": 2, "per_minute": 100}), tasks("one", 5))
    intake.push(make_source("two", retries=0), tasks("two", 1))
    store = RateLimitStore(redis_client, settings)
    one = admit_and_start(store, "one", 10)
    store.release("one", leases_of(one[0]))
    store.acquire_fetch("one")
    store.fail(admit_and_start(store, "two", 1)[0], "HTTP 500")
    stats = store.stats(["one", "two", "never"])
    assert (stats["one"].pending, stats["one"].active, stats["one"].admitted_last_minute, stats["one"].done) == (
        3, 1, 1, 1)
    assert (stats["two"].failed, stats["two"].dead_letters_waiting, stats["two"].pending) == (1, 1, 0)
    assert stats["never"].pending == 0
    assert set(store.stats_all()) == {"one", "two"}
    assert store.admit("one", 0).messages == []
    store.count_outcomes("one", {"stored": 3, "http_404": 1})
    assert store.counters("one")["outcome:stored"] == 3
