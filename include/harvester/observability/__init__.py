"""What operators see: the figures of the Harvester page and its JSON API (the Airflow plugin serves them)."""

from harvester import lazy_exports

_EXPORTS = {
    "DeadLettersView": "views",
    "HarvestViews": "views",
    "RequeueResult": "views",
    "ResultsPage": "views",
    "RunProgressView": "views",
    "RunSummary": "views",
    "SlotsView": "views",
    "SourceSummary": "views",
    "UnknownSource": "views",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
