"""Where records go (the MongoDB data handler, or the discard sink) and which URLs were seen."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.storage.archive import ArchivedPage, ArchiveWriter, archive_location
    from harvester.storage.archive_digests import ArchivedDigests
    from harvester.storage.archive_index import (
        ARCHIVE_INDEX_COLLECTION,
        DATA_RESPONSE_KIND,
        ArchiveIndex,
        cdxj_line,
    )
    from harvester.storage.archive_reader import ArchivedResponse, ArchiveReader, read_archived
    from harvester.storage.archive_replay import ArchiveReplay
    from harvester.storage.archive_retention import Expired, expire_archive
    from harvester.storage.conditional import conditional_headers, validators_of
    from harvester.storage.data_handler import DataHandler, WriteResult
    from harvester.storage.exports import MEDIA_TYPES, export_query, export_records
    from harvester.storage.lifecycle import REQUESTED_URLS, GoneMarks, gone_filter
    from harvester.storage.packages import PackageStatus, PackageStore, planned_task_id
    from harvester.storage.run_figures import PROXY_TIER_BYTES, PROXY_TIER_REQUESTS, RunFigures, proxy_tier_traffic
    from harvester.storage.run_hosts import HOST_READS, HostFetches, HostFigures, RunHosts, host_figures
    from harvester.storage.runs import RUNS_COLLECTION, RunStore
    from harvester.storage.snapshots import PageEvidence, PageSnapshot, SnapshotStore
    from harvester.storage.url_store import RunFrontier, URLStore, url_digest

__all__ = [
    "ARCHIVE_INDEX_COLLECTION",
    "DATA_RESPONSE_KIND",
    "HOST_READS",
    "MEDIA_TYPES",
    "PROXY_TIER_BYTES",
    "PROXY_TIER_REQUESTS",
    "REQUESTED_URLS",
    "RUNS_COLLECTION",
    "ArchiveIndex",
    "ArchiveReader",
    "ArchiveReplay",
    "ArchiveWriter",
    "ArchivedDigests",
    "ArchivedPage",
    "ArchivedResponse",
    "DataHandler",
    "Expired",
    "GoneMarks",
    "HostFetches",
    "HostFigures",
    "PackageStatus",
    "PackageStore",
    "PageEvidence",
    "PageSnapshot",
    "RunFigures",
    "RunFrontier",
    "RunHosts",
    "RunStore",
    "SnapshotStore",
    "URLStore",
    "WriteResult",
    "archive_location",
    "cdxj_line",
    "conditional_headers",
    "expire_archive",
    "export_query",
    "export_records",
    "gone_filter",
    "host_figures",
    "planned_task_id",
    "proxy_tier_traffic",
    "read_archived",
    "url_digest",
    "validators_of",
]
__getattr__, __dir__ = lazy_face(__name__)
