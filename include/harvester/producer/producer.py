"""Produce a run: register the source, claim waiting packages and push their tasks into the distributor intake.

The produce step is where a source's config enters the harvest: it registers the validated config in
Redis (:mod:`harvester.distributor.registry`) before pushing, so the distributor, the workers and the
page slots of this run all read that one copy; an edited YAML file takes effect at the next run.

Resume lives here too: a package left running by a crash (its tasks are nowhere in Redis: not in
intake, not delayed for a retry, not leased) goes back to waiting and is pushed again; finished
packages are never touched. Task ids of planned tasks are deterministic, so a re-push counts down
the same pending entries.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import redis
from pymongo.database import Database

from harvester.config import SourceConfig
from harvester.distributor import TaskMessage, dead_tasks_of_run
from harvester.producer.streams import prefetch
from harvester.settings import HarvesterSettings
from harvester.storage import PackageStore, planned_task_id

log = logging.getLogger(__name__)

CLAIM_TASKS = 10_000  # tasks claimed per claim round trip (a few packages; memory stays bounded)


class IntakeLike(Protocol):
    """What the producer needs of :class:`harvester.distributor.intake.Intake`."""

    def register_source(self, source: SourceConfig) -> None: ...

    def push(self, source: SourceConfig | str, messages: Iterable[TaskMessage]) -> int: ...

    def push_raw(self, source: SourceConfig | str, raw_messages: Iterable[str]) -> int: ...


class LiveTasks(Protocol):
    """What the producer needs of :class:`harvester.distributor.store.RateLimitStore`."""

    def live_task_ids(self, source: str, run_id: str) -> set[str]: ...


@dataclass
class ProduceResult:
    packages_reset: int = 0
    packages_claimed: int = 0
    tasks_pushed: int = 0
    tasks_lost: int = 0
    tasks_repushed: int = 0  # planned tasks of a half-pushed package (its producer died mid-push)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Producer:
    """Claims packages of a run and pushes their tasks, in pipelined batches.

    ``live_tasks`` answers which of a run's tasks Redis still holds (in intake, delayed for a retry,
    reserved or leased) in one atomic Lua call (``live_tasks.lua``): paging through intake while a
    distributor pops it would miss tasks that moved between pages. Resume asks once per produce step.
    """

    def __init__(self, database: Database, redis_client: redis.Redis, intake: IntakeLike, live_tasks: LiveTasks,
                 push_batch_size: int) -> None:
        self.packages = PackageStore(database)
        self.redis = redis_client
        self.intake = intake
        self.live_tasks = live_tasks
        self.push_batch_size = push_batch_size

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, database: Database, redis_client: redis.Redis) -> Producer:
        """The producer of a run's ``produce`` task: intake and rate-limit store on ``redis_client``."""
        from harvester.distributor import Intake, RateLimitStore

        return cls(database, redis_client, Intake(redis_client, settings), RateLimitStore(redis_client, settings),
                   settings.producer_push_batch_size)

    def resume(self, source: SourceConfig, run_id: str, result: ProduceResult | None = None) -> tuple[int, int]:
        """Put running packages whose tasks are gone from Redis back to waiting, and finish pushing the
        packages a killed producer left half-pushed.

        Returns (packages reset, discovered tasks lost). A running package with any live task keeps its
        live tasks (the reaper brings back tasks of dead workers); its planned tasks still pending but
        nowhere in Redis were never pushed (a producer killed mid-push: pending is only settled after a
        task's count-down, which comes before its lease goes) and are pushed now (``tasks_repushed``).
        """
        running = list(self.packages.running(source.name, run_id))
        if not running:
            return 0, 0
        live = self.live_tasks.live_task_ids(source.name, run_id)
        dead = dead_tasks_of_run(self.redis, source.name, run_id).by_package  # settled by the sensor, not re-run
        reset = lost = 0
        unpushed: list[str] = []
        for package in running:
            pending = set(package.get("pending", []))
            if pending & live:
                missing = pending - live - dead.get(int(package["package_id"]), set())
                if missing:
                    only_missing = {**package, "pending": sorted(missing), "discovered": True}
                    unpushed.extend(self._messages(source, run_id, only_missing))
                continue
            planned = [planned_task_id(source.name, run_id, package["package_id"], url)
                       for url in package.get("urls", [])]
            lost_ids = sorted(pending - set(planned))
            # Discovered tasks gone from Redis come back only by fetching their listing pages again.
            repush = [task_id for task_id in planned if task_id not in pending] if lost_ids else []
            if self.packages.reset_to_waiting(source.name, run_id, package["package_id"], package.get("claim"),
                                              lost_ids, repush):
                reset += 1
                lost += len(lost_ids)
        for start in range(0, len(unpushed), self.push_batch_size):
            self.intake.push_raw(source.name, unpushed[start:start + self.push_batch_size])
        if result is not None:
            result.tasks_repushed += len(unpushed)
        if unpushed:
            log.info("resume: %s planned task(s) of half-pushed package(s) of run %s pushed", len(unpushed), run_id)
        if reset:
            log.info("resume: %s running package(s) of run %s had no live task and went back to waiting", reset,
                     run_id)
        if lost:
            log.warning("resume: %s discovered task(s) of run %s were gone from Redis; their listing pages are "
                        "fetched again to rediscover them", lost, run_id)
        return reset, lost

    def produce(self, source: SourceConfig, run_id: str) -> ProduceResult:
        """Register the source, resume what a crash left, then push the tasks of every waiting package."""
        result = ProduceResult()
        self.intake.register_source(source)  # before any push: the run's tasks are admitted and run by it
        result.packages_reset, result.tasks_lost = self.resume(source, run_id, result)
        batch: list[str] = []
        # Claims (MongoDB) run one step ahead in a thread while this one pushes (Redis).
        for package in prefetch(self._claimed_packages(source, run_id, result), ahead=1):
            for message in self._messages(source, run_id, package):
                batch.append(message)
                if len(batch) >= self.push_batch_size:
                    result.tasks_pushed += self.intake.push_raw(source.name, batch)
                    batch = []
        if batch:
            result.tasks_pushed += self.intake.push_raw(source.name, batch)
        return result

    def _claimed_packages(self, source: SourceConfig, run_id: str, result: ProduceResult
                          ) -> Iterator[dict[str, Any]]:
        per_claim = max(1, CLAIM_TASKS // max(1, source.batch.size))
        while claimed := self.packages.claim(source.name, run_id, per_claim):
            result.packages_claimed += len(claimed)
            yield from claimed

    @staticmethod
    def _messages(source: SourceConfig, run_id: str, package: dict[str, Any]) -> Iterator[str]:
        """The package's pending planned tasks as TaskMessage JSON.

        Serialised directly (json.dumps of the TaskMessage fields) rather than through pydantic: every
        value comes from the validated source and plan, and at 200k tasks per run validation was the
        producer's largest cost. tests/producer checks that each message parses as a TaskMessage.
        """
        urls: list[str] = package.get("urls", [])
        pending_list: list[str] = package.get("pending", [])
        package_id = int(package["package_id"])
        head = json.dumps({"source": source.name, "kind": package.get("kind", "details"),
                           "depth": int(package.get("depth", 0)), "run_id": run_id, "package_id": package_id,
                           "attempt": 0, "country": source.country, "enqueued_at": time.time(),
                           **({"refetch": True} if package.get("refetch") else {})},
                          separators=(",", ":"))[1:-1]
        if not package.get("discovered") and len(pending_list) == len(urls):
            # Untouched package (the usual case): nothing discovered and nothing settled, so pending still
            # holds exactly the planned ids in the order of urls; no hashing needed.
            pairs: Iterable[tuple[str, str]] = zip(urls, pending_list, strict=True)
        else:
            pending = set(pending_list)
            pairs = ((url, task_id) for url in urls
                     if (task_id := planned_task_id(source.name, run_id, package_id, url)) in pending)
        requests = {seed.key: seed for seed in source.input.requests}  # a package holds a request's key
        for url, task_id in pairs:
            if (seed := requests.get(url)) is not None:
                request = seed.request.model_dump_json()
                yield f'{{"task_id":"{task_id}","url":{json.dumps(seed.url)},"request":{request},{head}}}'
            else:
                yield f'{{"task_id":"{task_id}","url":{json.dumps(url)},{head}}}'
