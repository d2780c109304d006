"""The dead-letter scan behind run progress and resume finds every dead task of the run while the list
moves under it: the distributor appends at the tail, and drops the oldest past the cap (or a re-queue
takes them) at the head, between the scan's pages."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from harvester.distributor import dead_tasks
from harvester.distributor.dead_tasks import dead_tasks_of_run
from harvester.redis_keys import SourceKeys

pytestmark = pytest.mark.integration

SOURCE = "shop"


def entry(run_id: str, number: int, reason: str = "http_503: retries exhausted") -> str:
    message = {"source": SOURCE, "run_id": run_id, "package_id": number % 3, "task_id": f"{run_id}-t{number}",
               "url": f"http://shop.test/p/{number}", "kind": "details"}
    return json.dumps({"message": message, "reason": reason, "failed_at": 1_700_000_000.0 + number})


class MovingDeadLetters(redis.Redis):
    """A client of the same server whose every page read is followed by the distributor's own moves: the
    ``pop`` oldest entries leave at the head (only the 20 of the old run: the tasks of r1 stay dead for
    the whole scan), ``push`` new ones of another run arrive at the tail."""

    def __init__(self, pool: redis.ConnectionPool, pop: int, push: int) -> None:
        super().__init__(connection_pool=pool)
        self.pop, self.push, self.reads, self.pushed, self.popped = pop, push, 0, 0, 0

    def lrange(self, name: Any, start: int, end: int) -> Any:
        page = super().lrange(name, start, end)
        self.reads += 1
        pipeline = super().pipeline(transaction=True)
        pop = min(self.pop, 20 - self.popped)
        if pop:
            self.popped += pop
            pipeline.lpop(name, pop)
        for _ in range(self.push):
            self.pushed += 1
            pipeline.rpush(name, entry("later-run", 10_000 + self.pushed))
        pipeline.execute()
        return page


@pytest.fixture
def dead_letters(redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> str:
    """20 old entries of another run at the head, then 30 of run r1, then 10 more of another run."""
    monkeypatch.setattr(dead_tasks, "DEAD_PAGE", 10)
    keys = SourceKeys(SOURCE)
    redis_client.delete(keys.dead_letters, keys.run_dead)
    entries = ([entry("old-run", n) for n in range(20)] + [entry("r1", n) for n in range(30)]
               + [entry("other-run", n) for n in range(10)])
    redis_client.rpush(keys.dead_letters, *entries)
    redis_client.hset(keys.run_dead, "r1", 30)
    return keys.dead_letters


def found(dead: dead_tasks.DeadTasks) -> set[str]:
    return {task for tasks in dead.by_package.values() for task in tasks}


def test_head_pops_between_pages_miss_no_task(redis_client: redis.Redis, dead_letters: str) -> None:
    moving = MovingDeadLetters(redis_client.connection_pool, pop=10, push=0)
    dead = dead_tasks_of_run(moving, SOURCE, "r1")
    assert moving.popped == 20  # the list did move between pages
    assert found(dead) == {f"r1-t{n}" for n in range(30)}
    assert dead.reasons == {"http_503": 30}


def test_tail_pushes_between_pages_count_no_task_twice(redis_client: redis.Redis, dead_letters: str) -> None:
    moving = MovingDeadLetters(redis_client.connection_pool, pop=0, push=7)
    dead = dead_tasks_of_run(moving, SOURCE, "r1")
    assert moving.pushed >= 14
    assert found(dead) == {f"r1-t{n}" for n in range(30)}
    assert dead.reasons == {"http_503": 30}


def test_both_moves_at_once(redis_client: redis.Redis, dead_letters: str) -> None:
    moving = MovingDeadLetters(redis_client.connection_pool, pop=4, push=9)
    dead = dead_tasks_of_run(moving, SOURCE, "r1")
    assert found(dead) == {f"r1-t{n}" for n in range(30)}
    assert dead.reasons == {"http_503": 30}


def test_a_still_list_is_read_whole(redis_client: redis.Redis, dead_letters: str) -> None:
    dead = dead_tasks_of_run(redis_client, SOURCE, "r1")
    assert found(dead) == {f"r1-t{n}" for n in range(30)}
    assert sorted(dead.by_package) == [0, 1, 2] and dead.reasons == {"http_503": 30}
