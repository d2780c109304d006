"""Prometheus metrics: what workers record in Redis, and the collector the distributor serves.

Names load on first use (see :func:`harvester.lazy_exports`): the collector needs prometheus-client.
"""

from harvester import lazy_exports

_EXPORTS = {
    "HarvestSnapshot": "snapshot",
    "HarvesterCollector": "collector",
    "SourceSnapshot": "snapshot",
    "metrics_registry": "collector",
    "read_snapshot": "snapshot",
    "record_fetches": "recording",
    "serve_metrics": "collector",
    "slots_by_country_and_state": "slots",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
