"""The archive index's rows written behind the WARC bytes, in bulk, with a journal that outlives a killed worker.

Inserting a batch's rows with it cost the archive writer about 0.05 ms of CPU a page (one MongoDB round trip a
batch of 16: pymongo's machinery, the wake-up), a third of what archiving a page cost in all (measured with
``time.thread_time()`` around each step over the bench's crawl, 2026-12-06). So on a local disk a batch's rows
are appended to a journal file beside the archive's files, in the same step as the WARC bytes, and kept in
memory; they reach the index in one insert every ``archive_index_flush_seconds`` (or at
:data:`FLUSH_ROWS` rows, or when the writer closes), and the journal is emptied.

What that keeps of the archive's promises:

- every record indexed: a row is in the journal before the batch goes on to be stored and its leases released.
  A worker killed before its rows reached the index leaves its journal; the next writer on that archive puts the
  rows in (:func:`recover_journals`: journals of a dead process of this machine at once, any other journal left
  unchanged for :data:`ABANDONED_AFTER_SECONDS`). Each row carries its ``_id`` from the start, so a row put in
  twice (flushed, then recovered) is one row. Killed between the WARC bytes and the journal, the batch was not
  stored: its tasks come back and are archived again, as before.
- a revisit for a payload already archived: the revisit lookup asks the index and then the rows still waiting
  here (:meth:`PendingRows.original_by_digest`), so a page archived a second ago by this process is found. Another
  process sees this process's rows only once flushed: two processes archiving the same payload within
  ``archive_index_flush_seconds`` may each write a response, as two batches within one round trip could before.
- storage that fails or fills: a journal that cannot be written fails the batch's archive like its WARC bytes
  (the gap counted, or the batch retried when ``required``); an index that cannot take the rows keeps them
  waiting (and journalled) for the next flush, and the batch goes on.
- readers (re-extraction, replay, the CDXJ export) see a page once its row is flushed: up to
  ``archive_index_flush_seconds`` after it was archived.

Object stores (no append, so no journal beside the files) and ``archive_index_flush_seconds: 0`` insert each
batch's rows with it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from harvester.errors import StorageError
from harvester.storage.archive_index import ArchiveIndex, Original, PayloadLocation, stored_warc_date

log = logging.getLogger(__name__)

JOURNAL_FOLDER = ".index-journal"  # under the archive's root: beside the files, never inside a source's folder
JOURNAL_SUFFIX = ".bson"
FLUSH_ROWS = 1024  # rows waiting that are flushed at once, whatever their age
# A journal nobody wrote to or emptied for this long belongs to a process that is gone (a live writer flushes every
# archive_index_flush_seconds, at most 60) or that cannot reach the index either: putting its rows in is safe.
ABANDONED_AFTER_SECONDS = 300.0
RECOVERY_INTERVAL_SECONDS = 60.0  # how often a writer looks for abandoned journals
# The token of a journal's name says whose it is: a writer's own (another writer of the same process is left alone),
# or one this process claimed to put back (retried at its next look when the index refused it).
WRITING, CLAIMED = "w", "c"


def _host() -> str:
    return (socket.gethostname().split(".", 1)[0] or "host").replace("/", "_")


def journal_owner(name: str) -> tuple[str, int] | None:
    """The (host, pid) a journal's file name says wrote it (``<host>-<pid>-<token>.bson``), None for another file."""
    if not name.endswith(JOURNAL_SUFFIX):
        return None
    parts = name[: -len(JOURNAL_SUFFIX)].rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def write_fully(handle: io.FileIO, data: bytes) -> None:
    """All of ``data`` through an unbuffered file (whose ``write`` may take part of it): the archive's files and
    journals are written so, each batch's bytes in the file before the next step."""
    remaining = memoryview(data)
    while remaining:
        remaining = remaining[handle.write(remaining) or 0:]


class IndexJournal:
    """One writer's journal: the BSON rows it has not put in the index yet, appended in one write a batch.

    The file stays open between batches (unbuffered, appending), and its name is looked up before each append: a
    journal claimed by a recovering process (renamed, :func:`recover_journals`) or emptied by a flush (deleted) is
    never written to again, the batch's rows start a new file under the journal's name. Opening the file by its name
    for each batch (open, ``isatty``, seek, write, close) was 85 µs of the writer's CPU a batch on 2 vCPUs, against
    one lookup and one write now (5.3 µs a demo page of the archive's 140, measured 2026-12-07)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.path = f"{folder}/{_host()}-{os.getpid()}-{WRITING}{os.urandom(6).hex()}{JOURNAL_SUFFIX}"
        self._handle: io.FileIO | None = None
        self._inode = -1  # the open file's, to tell it from a new file under the same name

    def append(self, documents: list[bytes]) -> None:
        handle = self._still_named()
        if handle is None:
            try:
                handle = open(self.path, "ab", buffering=0)  # noqa: SIM115 (kept open: close)
            except FileNotFoundError:  # the folder is made on the first miss
                os.makedirs(self.folder, exist_ok=True)
                handle = open(self.path, "ab", buffering=0)  # noqa: SIM115
            self._handle, self._inode = handle, os.fstat(handle.fileno()).st_ino
        try:
            write_fully(handle, b"".join(documents))
        except OSError:  # as before: the next batch opens the file by its name again
            self.close()
            raise

    def _still_named(self) -> io.FileIO | None:
        """The open file, when the journal's name still names it; else None (closed)."""
        if self._handle is None:
            return None
        try:
            if os.stat(self.path).st_ino == self._inode:
                return self._handle
        except FileNotFoundError:  # claimed or deleted
            pass
        self.close()
        return None

    def clear(self) -> None:
        """Every row in it is in the index: the file goes (the next batch's rows start a new one)."""
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def close(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None


def read_journal(path: str) -> list[bytes]:
    """A journal's rows as BSON documents (each starts with its length); a row cut short by a kill mid-write is
    left out (its batch was not stored: its tasks are archived again)."""
    with open(path, "rb") as handle:
        data = handle.read()
    documents, position = [], 0
    while position + 4 <= len(data):
        length = int.from_bytes(data[position:position + 4], "little")
        if length < 5 or position + length > len(data):
            break
        documents.append(data[position:position + length])
        position += length
    return documents


def _claimed_here(name: str) -> bool:
    """A journal this process claimed (renamed to its name) to put back, and has not yet."""
    return journal_owner(name) == (_host(), os.getpid()) and name.rsplit("-", 1)[-1].startswith(CLAIMED)


def abandoned_journals(folder: str, own: str, now: float | None = None) -> Iterator[str]:
    """Journals in ``folder`` whose rows nobody else will flush: not ``own`` (this writer's), and written by a
    process of this machine that is gone, or claimed earlier by this process, or unchanged for
    :data:`ABANDONED_AFTER_SECONDS` (a live writer empties its journal at each flush)."""
    now = time.time() if now is None else now
    host, pid = _host(), os.getpid()
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return
    for name in sorted(names):
        path = f"{folder}/{name}"
        owner = journal_owner(name)
        if owner is None or path == own:
            continue
        if _claimed_here(name) or (owner[0] == host and owner[1] != pid and not _process_alive(owner[1])):
            yield path
            continue
        with contextlib.suppress(FileNotFoundError):
            if now - os.stat(path).st_mtime >= ABANDONED_AFTER_SECONDS:
                yield path


def recover_journals(folder: str, own: str, index: ArchiveIndex) -> int:
    """Put the rows of abandoned journals into the index; how many rows. Each journal is claimed first (renamed to
    a name of this process), so two writers never both read one; one the index refuses stays, claimed, for the
    next look."""
    recovered = 0
    for path in abandoned_journals(folder, own):
        claimed = f"{folder}/{_host()}-{os.getpid()}-{CLAIMED}{os.urandom(6).hex()}{JOURNAL_SUFFIX}"
        if not _claimed_here(path.rsplit("/", 1)[-1]):
            try:
                os.rename(path, claimed)
            except FileNotFoundError:  # another writer claimed it first
                continue
            path = claimed
        documents = read_journal(path)
        index.insert_documents(documents)
        os.unlink(path)
        recovered += len(documents)
        log.warning("archive index: %d rows of an abandoned journal put in (%s)", len(documents), path)
    return recovered


# A response among the rows waiting, as a later lookup may need it: (final URL, fetched at, file, offset, length,
# connection id); made into an :class:`Original` only when a lookup finds it (most never are).
WaitingResponse = tuple[str, datetime, str, int, int, str | None]


def _original(waiting: WaitingResponse | None) -> Original | None:
    if waiting is None:
        return None
    uri, fetched_at, file, offset, length, connection_id = waiting
    return Original(uri, stored_warc_date(fetched_at), PayloadLocation(file, offset, length, connection_id))


@dataclass
class PendingRows:
    """The rows of one writer not in the index yet, and the responses among them for the revisit lookup."""

    documents: list[bytes] = field(default_factory=list)
    since: float | None = None  # monotonic time of the oldest row waiting
    by_digest: dict[tuple[str, str], WaitingResponse] = field(default_factory=dict)  # a payload's first response
    by_url: dict[tuple[str, str], WaitingResponse] = field(default_factory=dict)  # a URL's latest response

    def add(self, documents: list[bytes], responses: list[tuple[str, str, str, WaitingResponse]]) -> None:
        """``documents`` waiting; ``responses`` (source, url, digest, response) of the response records among them."""
        if self.since is None:
            self.since = time.monotonic()
        self.documents.extend(documents)
        for source, url, digest, response in responses:
            self.by_digest.setdefault((source, digest), response)
            self.by_url[(source, url)] = response

    def due(self, flush_seconds: float) -> bool:
        return bool(self.documents) and (len(self.documents) >= FLUSH_ROWS or self.since is None
                                         or time.monotonic() - self.since >= flush_seconds)

    def original_by_digest(self, source: str, digest: str) -> Original | None:
        return _original(self.by_digest.get((source, digest)))

    def original_by_url(self, source: str, url: str) -> Original | None:
        return _original(self.by_url.get((source, url)))

    def clear(self) -> None:
        self.documents, self.since = [], None
        self.by_digest.clear()
        self.by_url.clear()


class RowsBehind:
    """A writer's index rows on their way: journalled beside the files and flushed in bulk on a local disk, inserted
    with their batch elsewhere or when ``flush_seconds`` is 0. One per :class:`ArchiveWriter`, used from its thread."""

    def __init__(self, index: ArchiveIndex, flush_seconds: float) -> None:
        self.index = index
        self.flush_seconds = flush_seconds
        self.pending = PendingRows()
        self._journals: dict[str, IndexJournal] = {}  # an archive root -> this writer's journal there
        self._looked_at: dict[str, float] = {}  # an archive root -> when its abandoned journals were last looked for

    def originals(self, source: str, lookups: list[tuple[str, str, bool]]) -> dict[int, Original]:
        """:meth:`ArchiveIndex.originals`, then the rows waiting here: a 304's URL archived since the last flush
        (newer than the index's), a payload the index has not seen yet (the index's copy, older, comes first)."""
        found = self.index.originals(source, lookups)
        if self.pending.documents:
            for position, (url, digest, not_modified) in enumerate(lookups):
                waiting = (self.pending.original_by_url(source, url) if not_modified
                           else None if position in found else self.pending.original_by_digest(source, digest))
                if waiting is not None:
                    found[position] = waiting
        return found

    def write(self, root: str | None, documents: list[bytes],
              responses: list[tuple[str, str, str, WaitingResponse]]) -> None:
        """Index a batch's rows (``root``: the local archive root they go behind in, None: inserted now). Raises
        what the journal's write raises (the batch is then not archived); an index that refuses a flush only
        leaves the rows waiting."""
        if root is None or self.flush_seconds <= 0:
            self.index.insert_documents(documents)
        else:
            journal = self._journals.get(root)
            if journal is None:
                journal = self._journals[root] = IndexJournal(f"{root.rstrip('/')}/{JOURNAL_FOLDER}")
            journal.append(documents)
            self.pending.add(documents, responses)
            if self.pending.due(self.flush_seconds):
                self.flush()
        if root is not None:
            self._recover_due(root)

    def _recover_due(self, root: str) -> None:
        """Look for abandoned journals under ``root`` on the first batch there and every minute after (whatever
        this writer's own ``flush_seconds``: a worker set to 0 still puts back what a killed one left)."""
        now = time.monotonic()
        if now - self._looked_at.get(root, -RECOVERY_INTERVAL_SECONDS) < RECOVERY_INTERVAL_SECONDS:
            return
        self._looked_at[root] = now
        own = self._journals.get(root)
        try:
            recover_journals(f"{root.rstrip('/')}/{JOURNAL_FOLDER}", own.path if own else "", self.index)
        except (StorageError, OSError) as error:  # tried again at the next look
            log.warning("archive index: abandoned journals under %s not put back yet: %s", root, error)

    def close(self) -> None:
        """Close the journals' files (what they hold stays, for the next writer to put in)."""
        for journal in self._journals.values():
            journal.close()

    def flush(self) -> bool:
        """Insert every row waiting and empty the journals; False (rows kept, logged) when the index refused."""
        if not self.pending.documents:
            return True
        try:
            self.index.insert_documents(self.pending.documents)
        except StorageError as error:
            log.warning("archive index: %d rows wait for the next flush: %s", len(self.pending.documents), error)
            return False
        self.pending.clear()
        for journal in self._journals.values():
            try:
                journal.clear()
            except OSError as error:  # its rows are in the index: a later look puts them in once more, harmlessly
                log.warning("archive index: journal %s not emptied: %s", journal.path, error)
        return True
