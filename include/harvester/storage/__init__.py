"""Where records go (the MongoDB data handler, or the discard sink) and which URLs were seen."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.storage.conditional import conditional_headers, validators_of
    from harvester.storage.data_handler import DataHandler, WriteResult
    from harvester.storage.exports import MEDIA_TYPES, export_query, export_records
    from harvester.storage.lifecycle import REQUESTED_URLS, GoneMarks, gone_filter
    from harvester.storage.packages import PackageStatus, PackageStore, planned_task_id
    from harvester.storage.run_figures import RunFigures
    from harvester.storage.runs import RUNS_COLLECTION, RunStore
    from harvester.storage.snapshots import PageEvidence, PageSnapshot, SnapshotStore
    from harvester.storage.url_store import RunFrontier, URLStore, url_digest

__all__ = [
    "MEDIA_TYPES", "REQUESTED_URLS", "RUNS_COLLECTION", "DataHandler", "GoneMarks", "PackageStatus", "PackageStore",
    "PageEvidence", "PageSnapshot", "RunFigures", "RunFrontier", "RunStore", "SnapshotStore", "URLStore",
    "WriteResult", "conditional_headers", "export_query", "export_records", "gone_filter", "planned_task_id",
    "url_digest", "validators_of",
]
__getattr__, __dir__ = lazy_face(__name__)
