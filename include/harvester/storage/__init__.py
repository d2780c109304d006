"""Where records go (the MongoDB data handler, or the discard sink) and which URLs were seen.
"""

from harvester import lazy_exports

_EXPORTS = {
    "DataHandler": "data_handler",
    "PackageStatus": "packages",
    "PackageStore": "packages",
    "PageSnapshot": "snapshots",
    "SnapshotStore": "snapshots",
    "RunFrontier": "url_store",
    "RUNS_COLLECTION": "runs",
    "RunStore": "runs",
    "URLStore": "url_store",
    "WriteResult": "data_handler",
    "planned_task_id": "packages",
    "url_digest": "url_store",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
