"""The fault-matrix harness (docs/reliability.md): one harvest run against real processes, and the three checks
every row asserts.

- every record stored exactly once (one document per planned URL, none missing, none extra);
- the site never saw more than ``max_active`` requests of the source in flight, nor more than
  ``per_minute`` request starts in any rolling window of ``rate_window_seconds`` (the demo site
  records every request start);
- the run finishes on its own: every package reaches FINISHED with no hand-holding from the test.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymongo
import pytest
import redis
import yaml
from harvester.config.model import SourceConfig
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.settings import HarvesterSettings
from harvester.storage.packages import PackageStatus, PackageStore, PackageTask, planned_task_id

from tests.fixtures.demo_site import DemoSiteServer, demo_source_document

# Short settings so a whole matrix row takes seconds, not minutes (leases, windows, reaping).
FAST_RELIABILITY_SETTINGS: dict[str, object] = {
    "lease_seconds": 6,
    "heartbeat_seconds": 1,
    "reap_interval_seconds": 0.5,
    "rate_window_seconds": 5,
    "retry_base_seconds": 0.2,
    "retry_max_seconds": 1,
    "redis_retry_max_seconds": 0.5,
    "publish_batch_size": 4,
    "publish_grace_seconds": 3,  # an admission no distributor confirmed published comes back this soon
    "queued_lease_seconds": 60,  # a queued task's message presumed lost after this (above the visibility timeout)
    "celery_visibility_timeout_seconds": 20,  # kombu hands unacknowledged messages out again after this
    "body_size_cap_bytes": 512 * 1024,
}


@dataclass(frozen=True)
class SiteLimits:
    max_active: int
    per_minute: int  # starts allowed in any window of window_seconds
    window_seconds: float


def most_starts_in_window(starts: list[float], window_seconds: float) -> int:
    """The largest number of request starts inside any half-open window [t, t + window) (t a start)."""
    ordered = sorted(starts)
    best = 0
    for index, start in enumerate(ordered):
        best = max(best, bisect.bisect_left(ordered, start + window_seconds) - index)
    return best


def assert_site_within_limits(site: DemoSiteServer, client: str, limits: SiteLimits) -> dict[str, Any]:
    """The site's own view of one client: never over max_active in flight, never over per_minute starts."""
    seen = site.requests_of(client)
    assert seen["max_concurrent"] <= limits.max_active, (
        f"the site saw {seen['max_concurrent']} requests of {client} in flight, max_active is {limits.max_active}")
    busiest = most_starts_in_window(seen["starts"], limits.window_seconds)
    assert busiest <= limits.per_minute, (
        f"the site saw {busiest} request starts of {client} in one {limits.window_seconds}s window, "
        f"per_minute is {limits.per_minute}")
    return seen


@dataclass
class Harvest:
    """One run of one source: packages in MongoDB, tasks in intake, records in the output collection."""

    settings: HarvesterSettings
    redis: redis.Redis
    database: pymongo.database.Database
    site: DemoSiteServer
    source: SourceConfig
    run_id: str
    urls: list[str]
    package_size: int
    packages: PackageStore = field(init=False)

    def __post_init__(self) -> None:
        self.packages = PackageStore(self.database)
        self.packages.ensure_indexes()

    @property
    def limits(self) -> SiteLimits:
        return SiteLimits(self.source.rate_limit.max_active, self.source.rate_limit.per_minute,
                          self.settings.rate_window_seconds)

    @property
    def store(self) -> RateLimitStore:
        return RateLimitStore(self.redis, self.settings)

    @property
    def collection(self) -> pymongo.collection.Collection:
        return self.database[self.source.output_collection]

    def task_messages(self) -> list[TaskMessage]:
        messages = []
        for index, url in enumerate(self.urls):
            package_id = index // self.package_size
            messages.append(TaskMessage(task_id=planned_task_id(self.source.name, self.run_id, package_id, url),
                                        source=self.source.name, url=url, run_id=self.run_id,
                                        package_id=package_id))
        return messages

    def plan(self) -> None:
        """The packages of the run, as the planner writes them (every task pending)."""
        by_package: dict[int, list[PackageTask]] = {}
        for message in self.task_messages():
            by_package.setdefault(int(message.package_id or 0), []).append(
                PackageTask(message.task_id, message.url, "details", 0))
        self.packages.create_packages(self.source.name, self.run_id, sorted(by_package.items()))

    def push(self) -> None:
        Intake(self.redis, self.settings).push(self.source, self.task_messages())

    def start(self) -> None:
        self.plan()
        self.push()

    def package_documents(self) -> list[dict[str, Any]]:
        return list(self.database["packages"].find({"source": self.source.name, "run_id": self.run_id}))

    def finished(self) -> bool:
        documents = self.package_documents()
        return bool(documents) and all(doc["status"] == PackageStatus.FINISHED for doc in documents)

    def stored(self) -> int:
        return self.collection.count_documents({})

    def wait_finished(self, timeout: float, poll: float = 0.5, during: Callable[[], None] | None = None) -> None:
        """The run must finish on its own; ``during`` runs every poll (a fault injector may use it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if during is not None:
                during()
            try:
                if self.finished():
                    return
            except pymongo.errors.PyMongoError:
                pass  # a row may have the MongoDB server down right now
            time.sleep(poll)
        pytest.fail(f"run {self.run_id} did not finish within {timeout}s: {self.describe()}")

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(poll)
        pytest.fail(f"{what} did not happen within {timeout}s: {self.describe()}")

    def describe(self) -> str:
        try:
            stats = self.store.stats([self.source.name])[self.source.name]
            counters = self.store.counters(self.source.name)
        except redis.RedisError as error:
            stats, counters = f"redis: {error}", {}
        try:
            packages = [(doc["package_id"], doc["status"], len(doc.get("pending", [])))
                        for doc in self.package_documents()]
            stored = self.stored()
        except pymongo.errors.PyMongoError as error:
            packages, stored = f"mongo: {error}", -1
        return f"stats={stats} counters={counters} packages={packages} stored={stored}/{len(self.urls)}"

    def assert_stored_exactly_once(self) -> None:
        documents = list(self.collection.find({}, {"url": 1, "run_id": 1}))
        urls = [document["url"] for document in documents]
        missing = sorted(set(self.urls) - set(urls))
        extra = sorted(set(urls) - set(self.urls))
        assert not missing, f"{len(missing)} records never stored, e.g. {missing[:3]}"
        assert not extra, f"records nobody planned: {extra[:3]}"
        assert len(urls) == len(set(urls)) == len(self.urls), "a record was stored twice"

    def assert_packages_settled(self, failed: int = 0) -> None:
        documents = self.package_documents()
        assert all(doc["status"] == PackageStatus.FINISHED for doc in documents)
        assert sum(len(doc.get("pending", [])) for doc in documents) == 0
        assert sum(len(doc.get("failed", [])) for doc in documents) == failed

    def assert_every_row_holds(self, failed: int = 0) -> dict[str, Any]:
        """The three promises of the fault matrix."""
        assert self.finished(), self.describe()
        self.assert_stored_exactly_once() if failed == 0 else None
        self.assert_packages_settled(failed)
        return assert_site_within_limits(self.site, self.source.name, self.limits)


def write_source_file(settings: HarvesterSettings, site: DemoSiteServer, name: str, **overrides: Any
                      ) -> SourceConfig:
    """A details-only source against the demo site, written where workers read it (the sources dir)."""
    document = demo_source_document(site.url, name, **overrides)
    document.pop("listing", None)
    document["input"] = {"seeds": [f"{site.url}/product/1"], "kind": "details"}
    for key, value in overrides.items():
        document[key] = value
    (settings.sources_dir / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return SourceConfig.model_validate(document)


def slow_product_urls(site: DemoSiteServer, count: int, delay: float, first: int = 1) -> list[str]:
    """Product pages that each take ``delay`` seconds to answer (so a fault can land mid-batch)."""
    return [f"{site.url}/slow/{number}?delay={delay}" for number in range(first, first + count)]
