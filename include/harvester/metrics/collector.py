"""The Prometheus collector: Redis counters and stats turned into metrics at scrape time.

The distributor serves it (``metrics_port``), so there is one exporter per distributor and no
multi-process registry: every figure is read from Redis when Prometheus asks, which is also why
several distributors report the same numbers (query them with ``max by``, not ``sum by``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

import redis
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from harvester.errors import StorageError
from harvester.metrics.recording import FETCH_SECONDS, QUEUE_LATENCY_SECONDS
from harvester.metrics.slots import read_proxy_bytes, slots_by_country_and_state
from harvester.metrics.snapshot import HarvestSnapshot, read_snapshot
from harvester.settings import HarvesterSettings

log = logging.getLogger(__name__)

# Distributor totals in the counters hash -> metric name and help.
TASK_COUNTERS = {
    "admitted": ("harvester_tasks_admitted", "Tasks admitted by the rate-limit store."),
    "done": ("harvester_tasks_done", "Tasks whose output was stored and lease released."),
    "failed": ("harvester_tasks_failed", "Failed attempts (each retry or dead letter counts one)."),
    "retried": ("harvester_retries", "Failed attempts put back for another try after backoff."),
    "reaped": ("harvester_reaps", "Expired leases put back in intake (a worker died or stalled)."),
    "dead": ("harvester_dead_letters", "Tasks that went to dead letters (requeued ones included)."),
    "pushed": ("harvester_tasks_pushed", "Tasks pushed to intake by producers and link discovery."),
}


# What extraction counts per attribute (harvester.scraping.extraction.Problem kinds).
EXTRACTION_PROBLEM_KINDS = ("missing", "wrong_type", "too_long", "too_large", "too_deep", "bad_json", "bad_data",
                            "bad_selector")


class HarvesterCollector(Collector):
    """Reads one :class:`HarvestSnapshot` per scrape and yields every metric of it."""

    def __init__(self, client: redis.Redis, settings: HarvesterSettings) -> None:
        self.client = client
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        try:
            snapshot = read_snapshot(self.client, self.settings)
            proxy_bytes = read_proxy_bytes(self.client)
        except StorageError as error:
            log.warning("metrics scrape: Redis unavailable: %s", error)
            up = GaugeMetricFamily("harvester_redis_up", "1 when the collector could read Redis.")
            up.add_metric([], 0)
            yield up
            return
        up = GaugeMetricFamily("harvester_redis_up", "1 when the collector could read Redis.")
        up.add_metric([], 1)
        yield up
        yield from self.source_metrics(snapshot)
        yield from self.shared_metrics(snapshot, proxy_bytes)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names depend on Redis; registering must not read it

    @staticmethod
    def source_metrics(snapshot: HarvestSnapshot) -> Iterator[Metric]:
        source_label = ["source"]
        requests = CounterMetricFamily("harvester_requests", "Requests made by workers.",
                                       labels=["source", "outcome", "status"])
        records = {kind: CounterMetricFamily(f"harvester_records_{kind}", help_text, labels=source_label)
                   for kind, help_text in (("stored", "Records written to the output."),
                                           ("new", "Records written for the first time (upserted)."),
                                           ("updated", "Records that already existed and were rewritten."))}
        problems = CounterMetricFamily("harvester_extraction_problems", "Attributes missing or of the wrong type.",
                                       labels=["source", "attribute", "kind"])
        tasks = {field: CounterMetricFamily(name, help_text, labels=source_label)
                 for field, (name, help_text) in TASK_COUNTERS.items()}
        gauges = {name: GaugeMetricFamily(f"harvester_{name}", help_text, labels=source_label) for name, help_text in (
            ("tasks_pending", "Tasks in intake waiting for admission."),
            ("tasks_delayed", "Tasks waiting for their retry backoff."),
            ("tasks_active", "Tasks in flight (leased)."),
            ("dead_letters_waiting", "Entries now in the dead-letter list."),
            ("max_active", "The source's max_active limit."),
            ("per_minute", "The source's per_minute limit."),
            ("admitted_last_minute", "Fetch starts (per_minute tokens taken) in the rolling rate window."),
            ("active_saturation", "tasks_active / max_active (1 = the in-flight limit holds admission back)."),
            ("rate_saturation", "admitted_last_minute / per_minute (1 = the rate limit holds fetches back)."),
            ("source_paused", "1 while the whole source waits for a Retry-After."),
            ("paused_hosts", "Hosts of the source waiting for a Retry-After."),
        )}
        blocked = CounterMetricFamily("harvester_browser_blocked_requests", "Browser requests aborted by type.",
                                      labels=["source", "resource_type"])
        blocked_bytes = CounterMetricFamily("harvester_browser_blocked_bytes",
                                            "Bytes browser pages did not download thanks to resource blocking.",
                                            labels=source_label)
        transferred = CounterMetricFamily("harvester_browser_transferred_bytes",
                                          "Bytes browser pages downloaded.", labels=source_label)
        restarts = CounterMetricFamily("harvester_browser_restarts", "Browsers re-launched after failed loads.",
                                       labels=source_label)
        share = GaugeMetricFamily("harvester_attribute_share",
                                  "Share (0-1) of the last run's records that had the attribute.",
                                  labels=["source", "attribute"])
        drift = GaugeMetricFamily("harvester_selector_drift",
                                  "1 when the attribute's share dropped past the source's drift threshold.",
                                  labels=["source", "attribute"])
        histograms = {
            FETCH_SECONDS: HistogramMetricFamily("harvester_fetch_seconds", "Time to fetch a page.",
                                                 labels=source_label),
            QUEUE_LATENCY_SECONDS: HistogramMetricFamily(
                "harvester_queue_latency_seconds", "From a task's enqueue to its fetch start.", labels=source_label),
        }
        for name, source in snapshot.sources.items():
            for (outcome, status), amount in sorted(source.requests.items()):
                requests.add_metric([name, outcome, status], amount)
            for kind, family in records.items():
                family.add_metric([name], source.outcome(f"records_{kind}"))
            for kind in EXTRACTION_PROBLEM_KINDS:
                for attribute, amount in sorted(source.outcomes_with_prefix(f"{kind}:").items()):
                    problems.add_metric([name, attribute, kind], amount)
            for field, family in tasks.items():
                family.add_metric([name], source.counters.get(field, 0))
            stats = source.stats
            values = {
                "tasks_pending": stats.pending, "tasks_delayed": stats.delayed, "tasks_active": stats.active,
                "dead_letters_waiting": stats.dead, "max_active": source.max_active,
                "per_minute": source.per_minute, "admitted_last_minute": stats.admitted_last_minute,
                "active_saturation": stats.active / source.max_active if source.max_active else 0.0,
                "rate_saturation": stats.admitted_last_minute / source.per_minute if source.per_minute else 0.0,
                "source_paused": 1 if source.paused else 0, "paused_hosts": len(source.paused_hosts),
            }
            for metric, value in values.items():
                gauges[metric].add_metric([name], value)
            for resource_type, amount in sorted(source.outcomes_with_prefix("browser_blocked:").items()):
                blocked.add_metric([name, resource_type], amount)
            blocked_bytes.add_metric([name], source.outcome("browser_blocked_bytes"))
            transferred.add_metric([name], source.outcome("browser_transferred_bytes"))
            restarts.add_metric([name], source.outcome("browser_relaunches"))
            for attribute, health in sorted(source.extraction_health.items()):
                share.add_metric([name, attribute], float(health.get("share", 0.0)))
                drift.add_metric([name, attribute], 1 if health.get("drift") else 0)
            for key, family in histograms.items():
                histogram = source.histograms[key]
                family.add_metric([name], histogram.buckets, histogram.sum)
        yield requests
        yield from records.values()
        yield problems
        yield from tasks.values()
        yield from gauges.values()
        yield from (blocked, blocked_bytes, transferred, restarts, share, drift)
        yield from histograms.values()

    @staticmethod
    def shared_metrics(snapshot: HarvestSnapshot, proxy_bytes: dict[str, int]) -> Iterator[Metric]:
        depth = GaugeMetricFamily("harvester_celery_queue_depth", "Celery messages waiting in a queue.",
                                  labels=["queue"])
        for queue, messages in sorted(snapshot.queue_depths.items()):
            depth.add_metric([queue], messages)
        slots = GaugeMetricFamily("harvester_page_slots", "Page slots by country and state.",
                                  labels=["country", "state"])
        for country, states in slots_by_country_and_state(snapshot.slots).items():
            for state, count in sorted(states.items()):
                slots.add_metric([country, state], count)
        proxy = CounterMetricFamily("harvester_proxy_bytes", "Bytes browsed through each country's proxy.",
                                    labels=["country"])
        for country, amount in sorted(proxy_bytes.items()):
            proxy.add_metric([country], amount)
        yield from (depth, slots, proxy)


def metrics_registry(client: redis.Redis, settings: HarvesterSettings) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HarvesterCollector(client, settings))
    return registry


def serve_metrics(client: redis.Redis, settings: HarvesterSettings) -> tuple[WSGIServer, threading.Thread] | None:
    """Serve /metrics on ``metrics_host:metrics_port`` from a daemon thread; None when the port is 0."""
    if not settings.metrics_port:
        return None
    server, thread = start_http_server(settings.metrics_port, addr=settings.metrics_host,
                                       registry=metrics_registry(client, settings))
    log.info("metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port)
    return server, thread
