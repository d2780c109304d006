"""Everything Redis knows about the harvest right now, read in a few round trips.

One reader for two audiences: the Prometheus collector (harvester.metrics.collector) turns a
snapshot into metrics at scrape time, and the operators' page (harvester.observability.views) into
JSON. Neither keeps state of its own, so any number of distributors or API servers agree. It reads
through the components' own readers: a source's registration (``SourceRegistry``), its queue figures
(``stats.lua``, through ``RateLimitStore``) and the slot records (``SlotRegistry``), queued on one
pipeline with the counters only the metrics read.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis

from harvester.distributor import RateLimitStore, RegisteredSource, SourceRegistry, SourceStats
from harvester.errors import redis_storage_errors
from harvester.metrics.recording import BUCKETS, INFINITY
from harvester.pageslots import HostCapacity, SlotHosts, SlotRecord, SlotRegistry
from harvester.queues import DECLARED_QUEUES
from harvester.redis_keys import SOURCES_INDEX, PageSlotKeys, SourceKeys, distributor_heartbeat
from harvester.redis_scripts import ScriptPipeline, text
from harvester.settings import HarvesterSettings
from harvester.storage import HOST_READS, HostFigures, RunHosts, host_figures

PER_SOURCE_READS = 11  # replies queued per source by read_snapshot, in order
SCAN_COUNT = 500


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets (upper bound -> observations at or below it, +Inf last), sum and count."""

    buckets: list[tuple[str, int]]
    sum: float
    count: int


@dataclass
class SourceSnapshot:
    """One source: its registration, its live stats and its running totals."""

    name: str
    registration: RegisteredSource | None  # None: in the index, its config gone
    stats: SourceStats
    counters: dict[str, int]
    requests: dict[tuple[str, str], int]  # (outcome, HTTP status or "") -> requests
    histograms: dict[str, Histogram]
    paused_hosts: dict[str, float]  # host -> paused until (s), only hosts still paused
    paused_until: float  # the whole source waits until then (0: not paused)
    extraction_health: dict[str, dict[str, Any]]  # attribute -> {share, median, drop, drift}
    now: float
    run_quality: dict[str, str] = field(default_factory=dict)  # the last reported run: outcome, reason, shares
    # proxy.tiers: "proxy_tier_requests:<tier>" and "proxy_tier_bytes:<tier>" -> what each tier carried, ever
    proxy_tiers_traffic: dict[str, int] = field(default_factory=dict)
    hosts_run: str | None = None  # the run whose per-host figures the workers wrote last
    hosts: HostFigures | None = None  # that run's hosts now, when it fetched from several (else None)

    @property
    def last_run_shares(self) -> dict[str, float | None]:
        """stored, rejected, dead shares of the last reported run, for the quality alerts."""
        return json.loads(self.run_quality.get("shares") or "{}")

    @property
    def max_active(self) -> int:
        return self.registration.max_active if self.registration else 0

    @property
    def per_minute(self) -> int:
        return self.registration.per_minute if self.registration else 0

    @property
    def queue(self) -> str:
        return self.registration.queue if self.registration else "default"

    @property
    def country(self) -> str:
        return self.registration.country if self.registration else ""

    @property
    def render(self) -> str:
        return self.registration.render if self.registration else ""

    @property
    def paused(self) -> bool:
        return self.paused_until > self.now

    def outcome(self, name: str) -> int:
        return self.counters.get(f"outcome:{name}", 0)

    def outcomes_with_prefix(self, prefix: str) -> dict[str, int]:
        """``outcome:<prefix><rest>`` counters as rest -> amount (e.g. prefix "missing:")."""
        full = f"outcome:{prefix}"
        return {name[len(full):]: amount for name, amount in self.counters.items() if name.startswith(full)}

    def failures_by_reason(self) -> dict[str, int]:
        """Failed fetches and extractions by reason (every outcome that is not a success or a tally)."""
        reasons: Counter[str] = Counter()
        for (outcome, status), amount in self.requests.items():
            if outcome not in ("ok", "not_modified"):
                reasons[f"http_{status}" if outcome == "http_error" and status else outcome] += amount
        reasons["rejected"] += self.outcome("rejected")
        reasons["storage_error"] += self.outcome("storage_error")
        return {reason: amount for reason, amount in reasons.items() if amount}


@dataclass
class HarvestSnapshot:
    sources: dict[str, SourceSnapshot]
    queue_depths: dict[str, int]
    slots: list[SlotRecord] = field(default_factory=list)
    now: float = 0.0
    browser_tasks: dict[str, int] = field(default_factory=dict)  # country -> admitted browser tasks waiting
    slot_hosts: HostCapacity | None = None  # live slot hosts and the slots they can host
    distributors: int = 0  # distributors whose heartbeat is fresh


def parse_histogram(name: str, fields: dict[str, str]) -> Histogram:
    """Per-bucket counts as the workers write them, made cumulative as Prometheus expects."""
    running = 0
    buckets: list[tuple[str, int]] = []
    for bound in BUCKETS[name]:
        running += int(float(fields.get(f"{name}:{bound:g}", 0)))
        buckets.append((f"{bound:g}", running))
    running += int(float(fields.get(f"{name}:{INFINITY}", 0)))
    buckets.append((INFINITY, running))
    return Histogram(buckets=buckets, sum=float(fields.get(f"{name}:sum", 0.0)),
                     count=int(float(fields.get(f"{name}:count", running))))


@redis_storage_errors()
def read_snapshot(client: redis.Redis, settings: HarvesterSettings, only: list[str] | None = None) -> HarvestSnapshot:
    """The snapshot of every registered source (or of ``only``)."""
    pipeline = client.pipeline(transaction=False)
    pipeline.time()
    pipeline.smembers(SOURCES_INDEX)
    (seconds, microseconds), members = pipeline.execute()
    now = seconds + microseconds / 1_000_000  # the Redis clock, as the Lua scripts use
    names = sorted(text(name) for name in members)
    if only is not None:
        names = [name for name in names if name in only]
    store = RateLimitStore(client, settings)

    def build(pipeline: ScriptPipeline) -> None:
        for name in names:
            keys = SourceKeys(name)
            SourceRegistry.queue_read(pipeline.pipeline, name)
            store.queue_stats(pipeline, [name])
            for key in (keys.counters, keys.requests, keys.histograms, keys.host_paused, keys.extraction_health):
                pipeline.pipeline.hgetall(key)
            pipeline.pipeline.get(keys.paused_until)
            pipeline.pipeline.hgetall(keys.run_quality)
            pipeline.pipeline.hgetall(keys.proxy_tiers_traffic)
            pipeline.pipeline.get(keys.hosts_run)

    replies = store.scripts.run_pipeline(build) if names else []
    sources = {name: _source_snapshot(name, replies[index * PER_SOURCE_READS:(index + 1) * PER_SOURCE_READS], now)
               for index, name in enumerate(names)}
    read_host_figures(client, [source for source in sources.values() if source.hosts_run is not None], now)
    queues = sorted({*DECLARED_QUEUES, *(source.queue for source in sources.values())})
    pipeline = client.pipeline(transaction=False)
    for queue in queues:
        pipeline.llen(queue)
    depths = {queue: int(depth) for queue, depth in zip(queues, pipeline.execute(), strict=True)}
    countries = {source.country for source in sources.values() if source.render == "browser" and source.country}
    return HarvestSnapshot(sources=sources, queue_depths=depths, slots=SlotRegistry(client).slots(), now=now,
                           browser_tasks=browser_tasks_waiting(client, countries),
                           slot_hosts=SlotHosts(client).live_capacity(), distributors=live_distributors(client))


def read_host_figures(client: redis.Redis, sources: list[SourceSnapshot], now: float) -> None:
    """Each source's host figures of the run its workers wrote last, when that run fetched from several hosts:
    the run is known only from the first round trip, the number of its hosts' fields from a second (one HLEN a
    source), and only the sources over several hosts pay the third (the live host state), so 5,000 sources on one
    host each cost 5,000 small commands, not 30,000."""
    if not sources:
        return
    pipeline = client.pipeline(transaction=False)
    for source in sources:
        pipeline.hlen(SourceKeys(source.name).run_hosts(source.hosts_run))
    several = [source for source, fields in zip(sources, pipeline.execute(), strict=True)
               if int(fields) > RunHosts.FIELDS_PER_HOST]
    if not several:
        return
    pipeline = client.pipeline(transaction=False)
    for source in several:
        RunHosts.queue_read(pipeline, source.name, source.hosts_run)
    replies = pipeline.execute()
    for index, source in enumerate(several):
        source.hosts = host_figures(replies[index * HOST_READS:(index + 1) * HOST_READS], now)


def browser_tasks_waiting(client: redis.Redis, countries: set[str]) -> dict[str, int]:
    """Admitted browser tasks waiting for a page slot, per country: the lists the slots pop from (a browser
    task is no Celery message, so no queue depth shows them). ``countries`` (the browser sources') are listed
    even when empty."""
    prefix = PageSlotKeys().browser_tasks_prefix
    found = {text(key)[len(prefix):] for key in client.scan_iter(match=f"{prefix}*", count=SCAN_COUNT)}
    names = sorted(found | countries)
    pipeline = client.pipeline(transaction=False)
    for country in names:
        pipeline.llen(PageSlotKeys().browser_tasks(country))
    return {country: int(length) for country, length in zip(names, pipeline.execute(), strict=True)}


def live_distributors(client: redis.Redis) -> int:
    """Distributors whose heartbeat has not expired (each round refreshes it)."""
    return sum(1 for _ in client.scan_iter(match=distributor_heartbeat("*"), count=SCAN_COUNT))


def _source_snapshot(name: str, replies: list[Any], now: float) -> SourceSnapshot:
    (registration, stats, counters, requests, histograms, host_paused, health, paused, quality, tiers,
     hosts_run) = replies
    decoded = {text(k): text(v) for k, v in histograms.items()}
    request_counts: dict[tuple[str, str], int] = {}
    for raw_field, amount in requests.items():
        outcome, _, status = text(raw_field).partition("|")
        request_counts[(outcome, status)] = int(amount)
    return SourceSnapshot(
        name=name,
        registration=SourceRegistry.registered(name, registration),
        stats=RateLimitStore.source_stats(stats),
        counters={text(k): int(v) for k, v in counters.items()},
        requests=request_counts,
        histograms={histogram: parse_histogram(histogram, decoded) for histogram in BUCKETS},
        paused_hosts={text(host): float(until) for host, until in host_paused.items() if float(until) > now},
        paused_until=float(paused or 0),
        extraction_health={text(k): json.loads(v) for k, v in health.items()},
        now=now,
        run_quality={text(k): text(v) for k, v in quality.items()},
        proxy_tiers_traffic={text(k): int(v) for k, v in tiers.items()},
        hosts_run=None if hosts_run is None else text(hosts_run),
    )
