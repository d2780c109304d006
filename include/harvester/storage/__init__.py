"""Where records go (the MongoDB data handler, or the discard sink) and which URLs were seen."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.storage.data_handler import DataHandler, WriteResult
    from harvester.storage.packages import PackageStatus, PackageStore, planned_task_id
    from harvester.storage.runs import RUNS_COLLECTION, RunStore
    from harvester.storage.snapshots import PageSnapshot, SnapshotStore
    from harvester.storage.url_store import RunFrontier, URLStore, url_digest

__all__ = [
    "RUNS_COLLECTION", "DataHandler", "PackageStatus", "PackageStore", "PageSnapshot", "RunFrontier", "RunStore",
    "SnapshotStore", "URLStore", "WriteResult", "planned_task_id", "url_digest",
]
__getattr__, __dir__ = lazy_face(__name__)
