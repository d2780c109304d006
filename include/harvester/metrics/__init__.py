"""Prometheus metrics: what workers record in Redis, and the collector the distributor serves."""

from harvester.metrics.collector import HarvesterCollector, metrics_registry, serve_metrics
from harvester.metrics.recording import record_fetches
from harvester.metrics.slots import slots_by_country_and_state
from harvester.metrics.snapshot import HarvestSnapshot, SourceSnapshot, read_snapshot

__all__ = [
    "HarvestSnapshot", "HarvesterCollector", "SourceSnapshot", "metrics_registry", "read_snapshot",
    "record_fetches", "serve_metrics", "slots_by_country_and_state",
]
