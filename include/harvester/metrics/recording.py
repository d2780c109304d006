"""What workers record for the metrics: requests by outcome and status, two histograms per source, and each
run's fetches per site host (harvester.storage.RunHosts: counts for the metrics, no series per host).

Celery prefork children cannot share an in-process Prometheus registry, so workers write plain Redis
counters (one pipelined round trip per batch) and the distributor's collector turns them into
metrics at scrape time. Histogram buckets are stored per bucket (not cumulative): field
``<histogram>:<upper bound>`` counts observations in (previous bound, bound]; ``:sum`` and ``:count``
complete it, as Prometheus' own histogram does.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Protocol

import redis

from harvester.distributor import host_of
from harvester.redis_keys import SourceKeys
from harvester.storage import PROXY_TIER_BYTES, PROXY_TIER_REQUESTS, HostFetches, RunFigures, RunHosts

FETCH_SECONDS = "fetch_seconds"
QUEUE_LATENCY_SECONDS = "queue_latency_seconds"
# Upper bounds in seconds; +Inf is implied.
BUCKETS: dict[str, tuple[float, ...]] = {
    FETCH_SECONDS: (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    QUEUE_LATENCY_SECONDS: (0.1, 0.5, 1.0, 2.5, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 3600.0),
}
INFINITY = "+Inf"
HOST_UNREACHABLE = "host_unreachable"  # a fetch that reached nothing (harvester.scraping's outcome)


class Fetched(Protocol):
    """What recording needs of a fetch result (harvester.scraping.fetching.fetcher.FetchResult has it)."""

    outcome: str
    status: int | None
    elapsed: float
    started_at: float
    tier: str  # the source's proxy tier it went out on ('' without proxy.tiers)
    transferred: int  # bytes of the response over the wire


class Enqueued(Protocol):
    """What recording needs of a task message (harvester.distributor.TaskMessage has it)."""

    enqueued_at: float
    url: str
    run_id: str | None


def bucket_field(histogram: str, seconds: float) -> str:
    """The field of the bucket ``seconds`` falls in (smallest bound >= seconds, else +Inf)."""
    bounds = BUCKETS[histogram]
    position = bisect.bisect_left(bounds, seconds)
    return f"{histogram}:{bounds[position]:g}" if position < len(bounds) else f"{histogram}:{INFINITY}"


def request_field(outcome: str, status: int | None) -> str:
    return f"{outcome}|{status if status is not None else ''}"


def record_fetches(client: redis.Redis, source: str, messages: Sequence[Enqueued], fetches: Iterable[Fetched],
                   now: float | None = None, pipeline: redis.client.Pipeline | None = None) -> None:
    """Count each request by outcome and status, observe its fetch time and its queue latency (the task's
    enqueue to its fetch start) and add it to its run's host figures, in one pipelined round trip (or queued on
    ``pipeline``, which the caller sends with its own commands)."""
    now = time.time() if now is None else now
    keys = SourceKeys(source)
    fetches = list(fetches)
    requests: Counter[str] = Counter()
    buckets: Counter[str] = Counter()
    sums: Counter[str] = Counter()
    by_run: dict[str | None, dict[str, HostFetches]] = {}
    for message, fetch in zip(messages, fetches, strict=True):
        requests[request_field(fetch.outcome, fetch.status)] += 1
        elapsed = max(0.0, float(fetch.elapsed))
        host = by_run.setdefault(message.run_id, {}).setdefault(host_of(message.url), HostFetches())
        host.pages += 1
        host.seconds += elapsed
        host.unreachable += fetch.outcome == HOST_UNREACHABLE
        started_at = fetch.started_at or (now - elapsed)  # a result made without a fetch has no start
        latency = max(0.0, started_at - float(message.enqueued_at))
        for histogram, value in ((FETCH_SECONDS, elapsed), (QUEUE_LATENCY_SECONDS, latency)):
            buckets[bucket_field(histogram, value)] += 1
            buckets[f"{histogram}:count"] += 1
            sums[f"{histogram}:sum"] += value
    if not requests:
        return
    own = pipeline is None
    pipeline = client.pipeline(transaction=False) if pipeline is None else pipeline
    for name, amount in requests.items():
        pipeline.hincrby(keys.requests, name, amount)
    for name, amount in buckets.items():
        pipeline.hincrby(keys.histograms, name, amount)
    for name, amount in sums.items():
        pipeline.hincrbyfloat(keys.histograms, name, amount)
    queue_tier_traffic(client, pipeline, source, messages, fetches)
    for run_id, hosts in by_run.items():
        RunHosts(client).queue_add(pipeline, source, run_id, hosts)
    if own:
        pipeline.execute()


def tier_traffic(messages: Sequence[Enqueued], fetches: Sequence[Fetched]) -> dict[str | None, Counter[str]]:
    """Per run: requests and response bytes of each proxy tier (``proxy_tier_requests:<tier>``,
    ``proxy_tier_bytes:<tier>``), what the run's report shows as ``proxy_tiers`` (the source's proxy cost)."""
    by_run: dict[str | None, Counter[str]] = {}
    for message, fetch in zip(messages, fetches, strict=True):
        if fetch.tier:
            figures = by_run.setdefault(message.run_id, Counter())
            figures[f"{PROXY_TIER_REQUESTS}:{fetch.tier}"] += 1
            figures[f"{PROXY_TIER_BYTES}:{fetch.tier}"] += fetch.transferred
    return by_run


def queue_tier_traffic(client: redis.Redis, pipeline: redis.client.Pipeline, source: str, messages: Sequence[Enqueued],
                       fetches: Sequence[Fetched]) -> None:
    """:func:`tier_traffic` added to the runs' figures and to the source's own totals, on the caller's pipeline."""
    keys, figures = SourceKeys(source), RunFigures(client)
    totals: Counter[str] = Counter()
    for run_id, traffic in tier_traffic(messages, fetches).items():
        figures.queue_add(pipeline, source, run_id, traffic)
        totals.update(traffic)
    for name, amount in totals.items():
        pipeline.hincrby(keys.proxy_tiers_traffic, name, amount)
