"""The Prometheus collector: Redis counters and stats turned into metrics at scrape time.

The distributor serves it (``metrics_port``), so there is one exporter per distributor and no
multi-process registry: every figure is read from Redis when Prometheus asks, which is also why
several distributors report the same numbers (query them with ``max by``, not ``sum by``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

import redis
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from harvester.config import RULE_NAMES
from harvester.errors import StorageError
from harvester.metrics.recording import FETCH_SECONDS, QUEUE_LATENCY_SECONDS
from harvester.metrics.slots import slots_by_country_and_state
from harvester.metrics.snapshot import HarvestSnapshot, SourceSnapshot, read_snapshot
from harvester.pageslots import proxy_bytes_by_country, proxy_figures
from harvester.settings import HarvesterSettings
from harvester.storage import proxy_tier_traffic

log = logging.getLogger(__name__)

SOURCE_LABEL = ["source"]
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


# What extraction counts per attribute (harvester.scraping.extraction.validation.Problem kinds, the value rules
# among them).
EXTRACTION_PROBLEM_KINDS = ("missing", "wrong_type", "too_long", "too_large", "too_deep", "bad_json", "bad_data",
                            "bad_selector", *RULE_NAMES)
RUN_OUTCOMES = ("green", "degraded", "failed")


class HarvesterCollector(Collector):
    """Reads one :class:`HarvestSnapshot` per scrape and yields every metric of it."""

    def __init__(self, client: redis.Redis, settings: HarvesterSettings) -> None:
        self.client = client
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        try:
            snapshot = read_snapshot(self.client, self.settings)
            proxy_bytes = proxy_bytes_by_country(self.client)
            proxies = proxy_figures(self.client)
        except StorageError as error:  # every reader wraps its Redis errors
            log.warning("metrics scrape: Redis unavailable: %s", error)
            up = GaugeMetricFamily("harvester_redis_up", "1 when the collector could read Redis.")
            up.add_metric([], 0)
            yield up
            return
        up = GaugeMetricFamily("harvester_redis_up", "1 when the collector could read Redis.")
        up.add_metric([], 1)
        yield up
        yield from self.source_metrics(snapshot, detailed_sources(snapshot, self.settings.metrics_detailed_sources))
        yield from self.shared_metrics(snapshot, proxy_bytes)
        yield from proxy_metrics(proxies)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names depend on Redis; registering must not read it

    @staticmethod
    def source_metrics(snapshot: HarvestSnapshot, detailed: set[str] | None = None) -> Iterator[Metric]:
        """Every per-source metric; sources outside ``detailed`` (None: all are) get the compact set."""
        families = SourceFamilies()
        for source in snapshot.sources.values():
            families.add(source, detailed=detailed is None or source.name in detailed)
        if detailed is not None:
            add_other_sources_histograms(families.histograms, snapshot, detailed)
        yield from families.all()

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
        yield from process_metrics(snapshot)


PROXY_FIGURES = {"requests": "Connections opened through each proxy of a country's pool.",
                 "errors": "Connections a proxy of a country's pool failed (tried through the next).",
                 "bans": "Blocks a host answered through each proxy (each banned it from that host a while).",
                 "bytes": "Bytes relayed both ways through each proxy of a country's pool."}


def proxy_metrics(proxies: dict[str, list[dict[str, str | int]]]) -> Iterator[Metric]:
    """Each proxy of each country's pool (harvester.pageslots.proxy_pool): its figures, and whether it is out."""
    families = {figure: CounterMetricFamily(f"harvester_proxy_member_{figure}", help_text, labels=["country", "proxy"])
                for figure, help_text in PROXY_FIGURES.items()}
    out = GaugeMetricFamily("harvester_proxy_member_out", "1 while a proxy is backed off after consecutive failures.",
                            labels=["country", "proxy"])
    for country, members in proxies.items():
        for member in members:
            labels = [country, str(member["proxy"])]
            for figure, family in families.items():
                family.add_metric(labels, int(member[figure]))
            out.add_metric(labels, 1 if member["state"] == "out" else 0)
    yield from (*families.values(), out)


def process_metrics(snapshot: HarvestSnapshot) -> Iterator[Metric]:
    """The browser backlog per country (where browser tasks really wait), the live slot hosts and distributors:
    what the shipped alert rules (deploy/prometheus/alerts.yml) watch besides the per-source series."""
    waiting = GaugeMetricFamily("harvester_browser_tasks_waiting",
                                "Admitted browser tasks waiting for a page slot of their country.", labels=["country"])
    for country, tasks in sorted(snapshot.browser_tasks.items()):
        waiting.add_metric([country], tasks)
    hosts = GaugeMetricFamily("harvester_slot_hosts", "Slot hosts whose advertisement is live.")
    capacity = GaugeMetricFamily("harvester_slot_host_capacity", "Page slots the live slot hosts can host.")
    live = snapshot.slot_hosts
    hosts.add_metric([], live.hosts if live else 0)
    capacity.add_metric([], live.slots if live else 0)
    distributors = GaugeMetricFamily("harvester_distributors_alive", "Distributors whose heartbeat is fresh.")
    distributors.add_metric([], snapshot.distributors)
    yield from (waiting, hosts, capacity, distributors)


# Per-source gauges: name (after harvester_) -> help, and the value of a source.
SOURCE_GAUGES: dict[str, tuple[str, Callable[[SourceSnapshot], float]]] = {
    "tasks_pending": ("Tasks in intake waiting for admission.", lambda s: s.stats.pending),
    "tasks_delayed": ("Tasks waiting for their retry backoff.", lambda s: s.stats.delayed),
    "tasks_active": ("Tasks in flight (leased).", lambda s: s.stats.active),
    "dead_letters_waiting": ("Entries now in the dead-letter list.", lambda s: s.stats.dead_letters_waiting),
    "max_active": ("The source's max_active limit.", lambda s: s.max_active),
    "per_minute": ("The source's per_minute limit.", lambda s: s.per_minute),
    "admitted_last_minute": ("Fetch starts (per_minute tokens taken) in the rolling rate window.",
                             lambda s: s.stats.admitted_last_minute),
    "active_saturation": ("tasks_active / max_active (1 = the in-flight limit holds admission back).",
                          lambda s: s.stats.active / s.max_active if s.max_active else 0.0),
    "rate_saturation": ("admitted_last_minute / per_minute (1 = the rate limit holds fetches back).",
                        lambda s: s.stats.admitted_last_minute / s.per_minute if s.per_minute else 0.0),
    "source_paused": ("1 while the whole source waits for a Retry-After.", lambda s: 1 if s.paused else 0),
}
# harvester_hosts{state}: a source's site hosts by state, one series per state whatever the number of hosts. Every
# source has "paused"; a source whose run fetched from more than one host has every state (HostFigures).
HOST_STATES = ("all", "done", "waiting", "in_flight", "paused", "unreachable", "slowed")
# Per-source counters read from the source's outcome counters: metric -> help and the outcome counter it reads.
BROWSER_COUNTERS = {
    "harvester_browser_blocked_bytes": ("Bytes browser pages did not download thanks to resource blocking.",
                                        "browser_blocked_bytes"),
    "harvester_browser_transferred_bytes": ("Bytes browser pages downloaded.", "browser_transferred_bytes"),
    "harvester_browser_restarts": ("Browsers re-launched after failed loads.", "browser_relaunches"),
}
# Counters of a feature a source may not use, exported (as a group) once the source has counted any of its group:
# a source without conditional requests or output.archive gets no series that would stay 0.
FEATURE_COUNTERS = {
    # conditional requests: what a 304 spared the site and us
    "harvester_bytes_saved": ("Body bytes 304 answers did not send (their records' last body size).", "bytes_saved",
                              "conditional"),
    # the WARC archive of fetched pages (output.archive)
    "harvester_archived_pages": ("Fetched pages written to the source's WARC archive.", "archived", "archive"),
    "harvester_archive_gap_pages": ("Fetched pages the archive could not keep (its storage failed, filled or "
                                    "hung): their records were stored without an archived response.", "archive_gap",
                                    "archive"),
}


class SourceFamilies:
    """The metric families of every source, filled one source at a time, by concern."""

    def __init__(self) -> None:
        self.requests = CounterMetricFamily("harvester_requests", "Requests made by workers.",
                                            labels=["source", "outcome", "status"])
        self.records = {kind: CounterMetricFamily(f"harvester_records_{kind}", help_text, labels=SOURCE_LABEL)
                        for kind, help_text in (("stored", "Records written to the output."),
                                                ("new", "Records written for the first time (upserted); "
                                                        "stored - new were updated."),
                                                # what a re-harvest found, so an unchanged site shows as unchanged
                                                ("changed", "Existing records whose values changed (changed_at "
                                                            "moved); stored - new - changed were unchanged."),
                                                ("not_modified", "Records a 304 kept (a conditional request, no "
                                                                 "body)."))}
        self.problems = CounterMetricFamily("harvester_extraction_problems",
                                            "Attributes missing or of the wrong type.",
                                            labels=["source", "attribute", "kind"])
        self.tasks = {field: CounterMetricFamily(name, help_text, labels=SOURCE_LABEL)
                      for field, (name, help_text) in TASK_COUNTERS.items()}
        self.gauges = {name: GaugeMetricFamily(f"harvester_{name}", help_text, labels=SOURCE_LABEL)
                       for name, (help_text, _) in SOURCE_GAUGES.items()}
        self.blocked = CounterMetricFamily("harvester_browser_blocked_requests", "Browser requests aborted by type.",
                                           labels=["source", "resource_type"])
        self.browser = {name: CounterMetricFamily(name, help_text, labels=SOURCE_LABEL)
                        for name, (help_text, _) in BROWSER_COUNTERS.items()}
        self.features = {name: CounterMetricFamily(name, help_text, labels=SOURCE_LABEL)
                         for name, (help_text, _, _) in FEATURE_COUNTERS.items()}
        self.declare_hosts_and_proxy_tiers()
        self.share = GaugeMetricFamily("harvester_attribute_share",
                                       "Share (0-1) of the last run's records that had the attribute.",
                                       labels=["source", "attribute"])
        self.drift = GaugeMetricFamily("harvester_selector_drift",
                                       "1 when the attribute's share dropped past the source's drift threshold.",
                                       labels=["source", "attribute"])
        # the last reported run's outcome from its data (alerts watch it), and rejections by attribute and rule
        self.rejections = CounterMetricFamily("harvester_rejections", "Records rejected, by attribute and rule.",
                                              labels=["source", "attribute", "rule"])
        self.breached = GaugeMetricFamily("harvester_run_quality_breached",
                                          "1 when the last reported run breached a quality threshold (failed, or "
                                          "degraded with on_breach: warn).", labels=["source", "on_breach"])
        self.outcome = GaugeMetricFamily("harvester_run_outcome",
                                         "1 for the last reported run's outcome: green, degraded or failed.",
                                         labels=["source", "outcome"])
        self.run_share = GaugeMetricFamily("harvester_run_share",
                                           "Shares (0-1) of the last reported run: stored (of the pages that "
                                           "answered), rejected (of the records extracted), dead (unanswered).",
                                           labels=["source", "kind"])
        self.histograms = {
            FETCH_SECONDS: HistogramMetricFamily("harvester_fetch_seconds", "Time to fetch a page.",
                                                 labels=SOURCE_LABEL),
            QUEUE_LATENCY_SECONDS: HistogramMetricFamily(
                "harvester_queue_latency_seconds", "From a task's enqueue to its fetch start.", labels=SOURCE_LABEL),
        }

    def declare_hosts_and_proxy_tiers(self) -> None:
        """Where a source's requests go: its site hosts by state (never a series per host) and its proxy tiers."""
        self.hosts = GaugeMetricFamily("harvester_hosts", "Site hosts of the source by state: paused (at admission: "
                                       "Retry-After, repeated blocks, an open breaker); for a run over several "
                                       "hosts also all (fetched from), done, waiting (tasks queued), in_flight, "
                                       "unreachable (breaker open) and slowed (after blocks).",
                                       labels=["source", "state"])
        self.slowest_host = GaugeMetricFamily("harvester_slowest_host_fetch_seconds",
                                              "Mean fetch time of the run's slowest host, for a run over several "
                                              "hosts (the page and the report name it).", labels=SOURCE_LABEL)
        self.tiers = {kind: CounterMetricFamily(f"harvester_proxy_tier_{kind}", help_text, labels=["source", "tier"])
                      for kind, help_text in (("requests", "Requests a source made on each of its proxy tiers."),
                                              ("bytes", "Response bytes (head and body, over the wire) each proxy "
                                                        "tier of a source carried: what its plan bills."))}

    def add(self, source: SourceSnapshot, detailed: bool = True) -> None:
        """``detailed`` False (``metrics_detailed_sources``): no histograms, limits, saturations or rate window of
        its own, no browser series for an http source, and the :data:`ONCE_MOVED_COUNTERS` only once non-zero."""
        self._add_work(source, compact=not detailed)
        self._add_queue(source, limits=detailed)
        if detailed or is_browser_source(source):
            self._add_browser(source, compact=not detailed)
        self._add_features(source)
        self._add_hosts(source)
        self._add_extraction(source)

    def _add_work(self, source: SourceSnapshot, compact: bool = False) -> None:
        """Requests, records and the distributor's task totals (``compact``: no histograms, and the
        :data:`ONCE_MOVED_COUNTERS` left out while 0)."""
        name = source.name
        for (outcome, status), amount in sorted(source.requests.items()):
            self.requests.add_metric([name, outcome, status], amount)
        for kind, family in self.records.items():
            add_counter(family, name, source.outcome(f"records_{kind}"), compact)
        for field, family in self.tasks.items():
            add_counter(family, name, source.counters.get(field, 0), compact)
        for tier, traffic in sorted(proxy_tier_traffic(source.proxy_tiers_traffic).items()):
            for kind, amount in traffic.items():
                self.tiers[kind].add_metric([name, tier], amount)
        for key, family in self.histograms.items() if not compact else ():
            histogram = source.histograms[key]
            family.add_metric([name], histogram.buckets, histogram.sum)

    def _add_queue(self, source: SourceSnapshot, limits: bool = True) -> None:
        """The live queue figures and limits (stats.lua's numbers and the registration's)."""
        for metric, (_, value) in SOURCE_GAUGES.items():
            if limits or metric not in DETAILED_GAUGES:
                self.gauges[metric].add_metric([source.name], value(source))

    def _add_browser(self, source: SourceSnapshot, compact: bool = False) -> None:
        for resource_type, amount in sorted(source.outcomes_with_prefix("browser_blocked:").items()):
            self.blocked.add_metric([source.name, resource_type], amount)
        for metric, (_, outcome) in BROWSER_COUNTERS.items():
            add_counter(self.browser[metric], source.name, source.outcome(outcome), compact)

    def _add_features(self, source: SourceSnapshot) -> None:
        used = {feature for _, outcome, feature in FEATURE_COUNTERS.values() if source.outcome(outcome)}
        for metric, (_, outcome, feature) in FEATURE_COUNTERS.items():
            if feature in used:
                self.features[metric].add_metric([source.name], source.outcome(outcome))

    def _add_hosts(self, source: SourceSnapshot) -> None:
        """Counts by state, never a series per host: the slowest hosts are named by the page and the report."""
        self.hosts.add_metric([source.name, "paused"], len(source.paused_hosts))
        figures = source.hosts
        if figures is None or figures.hosts <= 1:
            return
        for state in HOST_STATES:
            if state != "paused":
                count = figures.hosts if state == "all" else getattr(figures, state)
                self.hosts.add_metric([source.name, state], count)
        self.slowest_host.add_metric([source.name], figures.slowest_mean_seconds)

    def _add_extraction(self, source: SourceSnapshot) -> None:
        for kind in EXTRACTION_PROBLEM_KINDS:
            for attribute, amount in sorted(source.outcomes_with_prefix(f"{kind}:").items()):
                self.problems.add_metric([source.name, attribute, kind], amount)
        for attribute, health in sorted(source.extraction_health.items()):
            self.share.add_metric([source.name, attribute], float(health.get("share", 0.0)))
            self.drift.add_metric([source.name, attribute], 1 if health.get("drift") else 0)
        for key, amount in sorted(source.outcomes_with_prefix("rejected:").items()):
            rule, _, attribute = key.rpartition(":")
            self.rejections.add_metric([source.name, attribute, rule], amount)
        quality = source.run_quality
        if quality:
            self.breached.add_metric([source.name, quality.get("on_breach", "fail")],
                                     1 if quality.get("breached") == "1" else 0)
            for outcome in RUN_OUTCOMES:
                self.outcome.add_metric([source.name, outcome], 1 if quality.get("outcome") == outcome else 0)
            for kind, share in sorted(source.last_run_shares.items()):
                if share is not None:
                    self.run_share.add_metric([source.name, kind], float(share))

    def all(self) -> Iterator[Metric]:
        """Every family, in the order the collector always yielded them."""
        yield self.requests
        yield from self.records.values()
        yield self.problems
        yield from self.tasks.values()
        yield from self.gauges.values()
        yield from (self.hosts, self.slowest_host)
        yield self.blocked
        yield from self.browser.values()
        yield from self.features.values()
        yield from (self.share, self.drift)
        yield from (self.rejections, self.breached, self.outcome, self.run_share)
        yield from self.tiers.values()
        yield from self.histograms.values()


# With ``metrics_detailed_sources`` set, these per-source series are left to the detailed sources: the
# limits are configuration (in the Airflow UI) and their saturations follow from them;
# admitted_last_minute too: it is what rate_saturation is made of, and rate(harvester_requests_total[1m]) gives it.
DETAILED_GAUGES = frozenset({"max_active", "per_minute", "admitted_last_minute", "active_saturation",
                             "rate_saturation"})
OTHER_SOURCES = "_other"
# What a source outside the detailed ones exports only once it is non-zero: counters of events a healthy source
# rarely has (failures, retries, reaps, re-harvest changes, 304s, browser re-launches). Redis holds each as a running
# total that never goes back to 0, so a series, once there, stays, and never flaps. The cost: rate() and
# increase() take a series' first sample as their start, so the counts made before the first scrape that shows
# it (the first failures of a source that never had any) are not in them; the series after that are exact.
# harvester_dead_letters_total is not among them: HarvestDeadLettersGrowing counts it with increase(), so every
# source always has it; nor are the counters every working source moves (requests, stored, new, admitted, done,
# pushed), which would come back at once; nor the gauges, which would appear and vanish as a run starts and ends.
ONCE_MOVED_COUNTERS = frozenset({"harvester_records_changed", "harvester_records_not_modified",
                                 "harvester_tasks_failed", "harvester_retries", "harvester_reaps",
                                 "harvester_browser_restarts"})


def add_counter(family: CounterMetricFamily, source: str, amount: float, compact: bool) -> None:
    """One source's series of a per-source counter; a ``compact`` source's :data:`ONCE_MOVED_COUNTERS` only once
    non-zero."""
    if amount or not (compact and family.name in ONCE_MOVED_COUNTERS):
        family.add_metric([source], amount)


def is_browser_source(source: SourceSnapshot) -> bool:
    return source.registration is not None and source.registration.render == "browser"


def detailed_sources(snapshot: HarvestSnapshot, limit: int | None) -> set[str] | None:
    """The ``limit`` sources with the most requests (ties by name), which keep every per-source series;
    None (no limit) when every source does."""
    if limit is None:
        return None
    busiest = sorted(snapshot.sources.values(), key=lambda source: (-sum(source.requests.values()), source.name))
    return {source.name for source in busiest[:limit]}


def add_other_sources_histograms(histograms: dict[str, HistogramMetricFamily], snapshot: HarvestSnapshot,
                                 detailed: set[str]) -> None:
    """The histograms of every source outside ``detailed``, summed into one ``source="_other"`` series each, so
    fleet-wide quantiles still count every observation."""
    others = [source for name, source in snapshot.sources.items() if name not in detailed]
    if not others:
        return
    for key, family in histograms.items():
        buckets: dict[str, int] = {}
        total = 0.0
        for source in others:
            histogram = source.histograms[key]
            total += histogram.sum
            for bound, count in histogram.buckets:
                buckets[bound] = buckets.get(bound, 0) + count
        family.add_metric([OTHER_SOURCES], list(buckets.items()), total)


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
