"""The archive's retention: a source's WARC files and index rows past its ``output.archive.keep`` are deleted.

Run by the daily clean-up (``harvester archive expire``, the ``archive_cleanup`` DAG) for every source with an
archive. A file goes once it was started before the cut-off and no row at or after it still points at it (its
own pages, or a newer revisit's payload), so a file appended to across the cut-off stays until all of it is old.
Files without any row (a batch whose index write failed) go by the time in their name alike. Rows whose file is
gone from storage without the clean-up (deleted by hand, by a bucket's own expiry) go too: left, they read as
nothing, and the payload filter and the index would make each new copy of their payloads a revisit of a file that
is no more. Once rows went, the source's payload filter is dropped (:mod:`harvester.storage.archive_digests`):
the next archived batch builds it from the rows left, so the filter never fills with payloads that are archived no
more.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from harvester.config import SourceConfig
from harvester.connections import resolve_filesystem
from harvester.errors import ArchiveUnavailable, StorageError
from harvester.storage.archive import WARC_SUFFIX, archive_location, file_url
from harvester.storage.archive_digests import ArchivedDigests
from harvester.storage.archive_index import ArchiveIndex

log = logging.getLogger(__name__)

# A file missing from the listing is gone only once it was started this long before the clean-up: a file a worker
# starts while the clean-up lists (its rows written after) is not in the listing, yet is there.
MISSING_AFTER = timedelta(hours=1)


@dataclass(frozen=True)
class Expired:
    files: int
    rows: int  # every row deleted, ``missing`` among them
    missing: int = 0  # rows of files gone from storage without the clean-up


def file_started(path: str) -> datetime | None:
    """When a file was started, from its name (``<time>-<host>-<pid>-<n>.warc.gz``); None for a foreign file."""
    name = path.rsplit("/", 1)[-1]
    if not name.endswith(WARC_SUFFIX):
        return None
    try:
        return datetime.strptime(name.split("-", 1)[0], "%Y%m%d%H%M%S%f").replace(tzinfo=UTC)
    except ValueError:
        return None


def expire_archive(source: SourceConfig, index: ArchiveIndex, default_location: str, now: datetime,
                   digests: ArchivedDigests | None = None) -> Expired:
    """Delete ``source``'s archived files and rows older than its ``keep``, and (``digests``) its payload filter
    when rows went; what was deleted."""
    archive = source.output.archive
    cutoff = now - archive.keep
    location = archive_location(source, default_location)
    try:
        filesystem, root = resolve_filesystem(location, archive.connection_id)
        folder = f"{root.rstrip('/')}/{source.name}"
        paths = [path for path in filesystem.find(folder) if path.endswith(WARC_SUFFIX)] \
            if filesystem.exists(folder) else []
    except (OSError, ValueError) as error:
        raise ArchiveUnavailable(f"listing the archive of {source.name} at {location} failed: {error}") from error
    old = {file_url(location, root, path): path for path in paths
           if (started := file_started(path)) is not None and started < cutoff}
    kept = index.files_with_rows_since(list(old), cutoff)
    deleted: list[str] = []
    for url, path in old.items():
        if url in kept:
            continue
        try:
            filesystem.rm(path)
            deleted.append(url)
        except FileNotFoundError:
            deleted.append(url)
        except OSError as error:  # one file that cannot go is retried by the next clean-up
            log.warning("%s: deleting the archived file %s failed: %s", source.name, url, error)
    rows = index.forget(source.name, deleted, cutoff)
    missing = forget_missing(source, index, file_url(location, root, folder) + "/",
                             {file_url(location, root, path) for path in paths}, now - MISSING_AFTER)
    rows += missing
    if rows and digests is not None:
        try:
            digests.forget(source.name)
        except StorageError as error:  # Redis: its stale bits cost lookups, never a record; dropped at the next one
            log.warning("%s: the archive's payload filter was not dropped after the clean-up: %s", source.name, error)
    return Expired(len(deleted), rows, missing)


def forget_missing(source: SourceConfig, index: ArchiveIndex, folder: str, listed: set[str],
                   started_before: datetime) -> int:
    """Delete the rows of ``source`` whose file under ``folder`` the listing did not find, started before
    ``started_before`` (and the revisits whose payload is in one); how many. Files under another location (the
    source's moved since) are left alone: this listing cannot tell. A listing that found no file at all is not
    believed: an unmounted disk or a bucket answering empty must not cost the whole index."""
    if not listed:
        return 0
    missing = sorted(file for file in index.files_under(folder)
                     if file not in listed and (started := file_started(file)) is not None
                     and started < started_before)
    if not missing:
        return 0
    rows = index.forget_files(source.name, missing)
    log.warning("%s: %d archived files are gone from storage (not by the clean-up): their %d index rows deleted, "
                "e.g. %s", source.name, len(missing), rows, missing[0])
    return rows
