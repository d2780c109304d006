"""What operators see: the figures of the Harvester page and its JSON API (the Airflow plugin serves them)."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.errors import UnknownSource
    from harvester.observability.views import (
        DeadLettersView,
        HarvestViews,
        RequeueResult,
        ResultsPage,
        RunProgressView,
        RunRecordsView,
        RunSummary,
        SlotsView,
        SourceSummary,
    )

__all__ = [
    "DeadLettersView", "HarvestViews", "RequeueResult", "ResultsPage", "RunProgressView", "RunRecordsView",
    "RunSummary",
    "SlotsView", "SourceSummary", "UnknownSource",
]
__getattr__, __dir__ = lazy_face(__name__)
