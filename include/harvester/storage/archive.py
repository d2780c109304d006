"""Every fetched response kept as WARC/1.1 (DESIGN.md section 16): what the site said, to re-extract and replay.

A source with ``output.archive`` gets, per fetched page, a ``response`` record (or a ``revisit`` record when the
site answered 304, or when the same payload is already archived for the source: its payload filter and the index
say so, :mod:`harvester.storage.archive_digests`) and the ``request`` record that produced it
(:mod:`harvester.storage.warc_records`), gzip per record (each record is readable on its own from the index's
offset and length). Credentials never reach the archive: the request's ``Authorization``,
``Cookie`` and every header the source's connection adds keep their names with the value ``[redacted]``, and
the response's ``Set-Cookie`` likewise.

Files live where the source says (:func:`harvester.connections.resolve_filesystem`: fsspec, or Airflow's
``ObjectStoragePath`` inside Airflow), one folder per source and run: ``<location>/<source>/<run>/<time>-<host>-
<pid>-<n>.warc.gz``. A worker process appends its batches to its current file of that run on a local disk, and
rotates past ``max_file_mb``; on an object store (whose objects cannot be appended to) each batch is a file.
The index (:mod:`harvester.storage.archive_index`) is written after the bytes, so a row always points at a whole
record: on a local disk behind them, journalled and inserted in bulk (:mod:`harvester.storage.archive_journal`).
A write that fails or hangs (``archive_write_timeout_seconds``) raises :class:`ArchiveUnavailable`; the
worker then counts the gap (or retries the batch when the archive is ``required``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import queue
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from harvester.config import SourceConfig
from harvester.connections import resolve_filesystem
from harvester.errors import ArchiveUnavailable, StorageError
from harvester.settings import HarvesterSettings
from harvester.storage.archive_digests import ArchivedDigests
from harvester.storage.archive_index import ArchiveIndex, IndexEntry, Original, media_type
from harvester.storage.archive_journal import RowsBehind, WaitingResponse, write_fully
from harvester.storage.warc_records import ArchivedPage, PlacedRecord, WarcBatch, labelled_sha1

__all__ = ["WARC_SUFFIX", "ArchiveWriter", "ArchivedPage", "archive_location", "file_url"]

log = logging.getLogger(__name__)

WARC_SUFFIX = ".warc.gz"
OPEN_FILES_KEPT = 16  # a writer's local files kept open for appends (runs of sources it archives at once)


@dataclass
class _OpenFile:
    path: str
    size: int
    handle: io.FileIO | None = None  # a local file's, unbuffered, kept open between its batches

    def deleted(self) -> bool:
        """Whether the file kept open was deleted meanwhile (appends would go to no name: lost)."""
        return self.handle is not None and os.fstat(self.handle.fileno()).st_nlink == 0

    def close(self) -> None:
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.close()
            self.handle = None


class _StillWriting(Exception):
    """A call handed to the writer's thread has not ended within its time."""


class _Job:
    """One call handed to the writer's thread: its result or error, and a lock released when it ends."""

    __slots__ = ("arguments", "call", "ended", "error", "finished", "result")

    def __init__(self, call: Callable[..., Any], arguments: tuple[Any, ...]) -> None:
        self.call, self.arguments = call, arguments
        self.ended = threading.Lock()
        self.ended.acquire()  # released by the thread once the call returned or raised
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None

    def wait(self, timeout: float) -> Any:
        """The call's result (its error raised); :class:`_StillWriting` when it has not ended within ``timeout``."""
        if not self.ended.acquire(timeout=timeout):
            raise _StillWriting
        self.ended.release()
        if self.error is not None:
            raise self.error
        return self.result


class _WriterThread:
    """The writer's one thread: a batch's steps that touch the storage or the index run there, so a store that
    hangs holds it, never the batch (the caller waits ``archive_write_timeout_seconds``). Why not a
    ``ThreadPoolExecutor``: its future's condition and its worker's wake-up cost 124 µs of CPU a call after a pause
    against 61 for a queue and a lock (measured on 2 vCPUs, 2026-12-07); the archive hands over once a wave of
    pages. A daemon thread: one stuck in a hanging write never holds the process's exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="harvester-archive", daemon=True)
        self._thread.start()

    def submit(self, call: Callable[..., Any], *arguments: Any) -> _Job:
        job = _Job(call, arguments)
        self._jobs.put(job)
        return job

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job.result = job.call(*job.arguments)
            except BaseException as error:  # the caller raises it (a timer's flush: nobody reads it)
                job.error = error
            job.finished = True
            job.ended.release()

    def stop(self) -> None:
        """The thread ends after the calls queued (a hanging one: never; it is a daemon)."""
        self._jobs.put(None)


class ArchiveWriter:
    """Writes one batch's pages of one source as WARC records and indexes them (one per worker process)."""

    def __init__(self, index: ArchiveIndex, default_location: str, write_timeout_seconds: float = 30.0,
                 index_flush_seconds: float = 0.0, archived_digests: ArchivedDigests | None = None) -> None:
        self.index = index
        # which payloads may be archived already (None: every page's payload is looked up in the index)
        self.archived_digests = archived_digests
        self.rows = RowsBehind(index, index_flush_seconds)  # the index's rows: written behind, or with each batch
        self._flush_timer: threading.Timer | None = None
        self.default_location = default_location.rstrip("/")
        self.write_timeout_seconds = write_timeout_seconds
        self._open: dict[tuple[str, str], _OpenFile] = {}  # (source, run) -> this process's current local file
        self._sequence = 0
        self._lock = threading.Lock()
        self._thread: _WriterThread | None = None
        self._pending: _Job | None = None  # the last write, which may still hang past its timeout
        # a location's filesystem, resolved once per process: resolving it for every batch (fsspec's registry, or
        # Airflow's connection lookup inside Airflow) was 3 % of the archive's CPU
        self._filesystems: dict[tuple[str, str | None], tuple[Any, str, bool]] = {}

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> ArchiveWriter:
        index = ArchiveIndex.from_settings(settings)
        return cls(index, settings.archive_location, settings.archive_write_timeout_seconds,
                   settings.archive_index_flush_seconds, ArchivedDigests.from_settings(settings, index))

    def location_of(self, source: SourceConfig) -> str:
        return archive_location(source, self.default_location)

    def archive(self, source: SourceConfig, pages: list[ArchivedPage]) -> int:
        """Write and index ``pages`` (grouped by run); the number of pages archived. Raises
        :class:`ArchiveUnavailable` when the files or the index could not be written in time."""
        by_run: dict[str, list[ArchivedPage]] = {}
        for page in pages:
            by_run.setdefault(page.run_id, []).append(page)
        written = 0
        for run_id, run_pages in by_run.items():
            try:
                written += self._archive_run(source, run_id, run_pages)
            except _StillWriting:
                raise ArchiveUnavailable(f"the archive at {self.location_of(source)} did not answer within "
                                         f"{self.write_timeout_seconds:g}s") from None
            except ArchiveUnavailable:
                raise
            except StorageError as error:  # the index (MongoDB): one kind of archive failure
                raise ArchiveUnavailable(f"archive index: {error}") from error
            except (OSError, ValueError, RuntimeError) as error:  # fsspec's backends raise these (a full disk,
                raise ArchiveUnavailable(  # a refused bucket, a dead mount)
                    f"writing the archive at {self.location_of(source)} failed: {type(error).__name__}: {error}"
                ) from error
        self._arm_flush()
        return written

    def _in_thread(self, source: SourceConfig, call: Callable[..., Any], *arguments: Any) -> Any:
        """``call`` in the writer's thread, waited for ``archive_write_timeout_seconds`` (:class:`_StillWriting`
        past it): every step that touches the storage or the index runs there, so one that hangs holds that thread,
        never the batch. While one still hangs, the next is refused (never queued behind it)."""
        if self._pending is not None and not self._pending.finished:
            raise ArchiveUnavailable(f"the archive at {self.location_of(source)} has not finished an earlier "
                                     "write: this batch is not archived")
        if self._thread is None:
            self._thread = _WriterThread()
        job = self._pending = self._thread.submit(call, *arguments)
        return job.wait(self.write_timeout_seconds)

    def _arm_flush(self) -> None:
        """Rows waiting reach the index within ``archive_index_flush_seconds`` even when no batch follows (an idle
        worker): a timer hands a flush to the writer's thread, which re-arms it while rows still wait."""
        if self._flush_timer is None and self.rows.pending.documents:
            timer = self._flush_timer = threading.Timer(self.rows.flush_seconds, self._flush_later)
            timer.daemon = True
            timer.start()

    def _flush_later(self) -> None:
        self._flush_timer = None
        thread = self._thread
        if thread is not None:  # (the writer closed meanwhile: it flushed, and the thread ends before this call)
            thread.submit(self._flush_due)

    def _flush_due(self) -> None:
        try:
            if self.rows.pending.due(self.rows.flush_seconds):
                self.rows.flush()
        finally:  # whatever happened, rows still waiting get another timer
            self._arm_flush()

    def flush(self) -> bool:
        """Every row waiting into the index now, in the writer's thread (after the batches before it); False when
        the index refused them or did not answer within ``archive_write_timeout_seconds`` (they still wait)."""
        if self._thread is None or not self.rows.pending.documents:
            return True
        try:
            return self._thread.submit(self.rows.flush).wait(self.write_timeout_seconds)
        except _StillWriting:
            return False

    def _archive_run(self, source: SourceConfig, run_id: str, pages: list[ArchivedPage]) -> int:
        """One run's pages. The digests, the payload filter's screening (Redis, bounded by the client's socket
        timeout like every Redis call of a batch), the records and the index rows are made in the calling thread;
        what reads or writes the storage or the index runs in the writer's thread (:meth:`_in_thread`): resolving
        the location's filesystem, the revisit lookups, the file's bytes and the rows' journal. Until 2026-12-07
        the records were made in the writer's thread too, and the same work cost 10-20 µs a page more there than
        in the caller (the archive off, on and split this way alternated by round, 40 rounds of 600 demo pages;
        docs/benchmarks.md): a thread woken once a wave runs with colder caches, on two cores often on the other
        CPU than the crawl's."""
        settings = source.output.archive
        location = self.location_of(source)
        resolved = self._filesystems.get((location, settings.connection_id))
        if resolved is None:  # once per process and location (inside Airflow a connection is read: in the thread)
            resolved = self._in_thread(source, self._filesystem, location, settings.connection_id)
        filesystem, root, appendable = resolved
        raw_digests = [hashlib.sha1(page.exchange.body).digest() for page in pages]
        digests = [labelled_sha1(raw) for raw in raw_digests]
        asked = self._asked(source.name, pages, raw_digests)
        originals = self._in_thread(source, self._originals, source.name, pages, digests, asked) if asked else {}
        while True:  # twice when the run's file was deleted under its handle: then the batch goes to a new file
            current, retired = self._current_file(source.name, run_id, root, appendable, settings.max_file_mb)
            batch = WarcBatch(source.name, current.path.rsplit("/", 1)[-1], current.size == 0, len(pages))
            placed = [batch.add(page, digest, originals.get(index))
                      for index, (page, digest) in enumerate(zip(pages, digests, strict=True))]
            documents, responses = self._rows(source, file_url(location, root, current.path),
                                              current.size, pages, digests, placed, originals)
            if self._in_thread(source, self._store, filesystem, current, retired, batch.data(), appendable,
                               (source.name, run_id), root, documents, responses):
                return len(documents)

    def _asked(self, source: str, pages: list[ArchivedPage], raw_digests: list[bytes]) -> list[int]:
        """The positions of the pages to look up in the index for what they revisit: a 304's URL, and a payload the
        source's filter may have seen (most payloads it has never seen: a lookup is a round trip a batch)."""
        fresh = [position for position, page in enumerate(pages) if page.exchange.status != 304]
        screened = None if self.archived_digests is None else self.archived_digests.screen(
            source, [raw_digests[position] for position in fresh])
        if screened is None:
            return list(range(len(pages)))
        unseen = {position for position, maybe in zip(fresh, screened, strict=True) if not maybe}
        return [position for position in range(len(pages)) if position not in unseen]

    def _originals(self, source: str, pages: list[ArchivedPage], digests: list[str],
                   asked: list[int]) -> dict[int, Original]:
        """What each asked page revisits, by its position: the index, then the rows still waiting (whose flush
        runs in the writer's thread too)."""
        found = self.rows.originals(source, [
            (pages[position].url, digests[position], pages[position].exchange.status == 304) for position in asked])
        return {asked[number]: original for number, original in found.items()}

    def _current_file(self, source: str, run_id: str, root: str, appendable: bool,
                      max_file_mb: float) -> tuple[_OpenFile, _OpenFile | None]:
        """The run's file for this batch, taken out of the files kept open until its bytes are written (a batch
        that failed never leaves it to be appended to), and the full one it replaces (closed in the thread)."""
        with self._lock:
            current = self._open.pop((source, run_id), None) if appendable else None
        retired = None
        if current is not None and current.size >= max_file_mb * 1024 * 1024:
            current, retired = None, current  # rotated: this batch starts a new file
        if current is None:
            current = _OpenFile(self._new_file_path(root, source, run_id), 0)
        return current, retired

    @staticmethod
    def _rows(source: SourceConfig, archived_file: str, start: int, pages: list[ArchivedPage], digests: list[str],
              placed: list[PlacedRecord], originals: dict[int, Original],
              ) -> tuple[list[bytes], list[tuple[str, str, str, WaitingResponse]]]:
        """The batch's index rows (BSON), its records at ``start`` in ``archived_file``, and the responses among
        them (what a lookup before the next flush may find)."""
        connection_id = source.output.archive.connection_id
        documents: list[bytes] = []
        responses: list[tuple[str, str, str, WaitingResponse]] = []
        for index, (page, digest, (kind, offset, length, record_id)) in enumerate(
                zip(pages, digests, placed, strict=True)):
            entry = IndexEntry(
                source=source.name, run=page.run_id, task_id=page.task_id, url=page.url, final_url=page.exchange.url,
                time=page.fetched_at, file=archived_file, offset=start + offset, length=length, digest=digest,
                status=page.exchange.status, record=kind, connection_id=connection_id, kind=page.kind,
                depth=page.depth, record_id=record_id,
                payload=(originals[index].payload if kind == "revisit" and index in originals else None),
                mime=media_type(page.exchange.response_headers) if kind == "response" else None)
            documents.append(entry.encoded())
            if kind == "response":
                responses.append((source.name, page.url, digest, (
                    page.exchange.url, page.fetched_at, archived_file, start + offset, length, connection_id)))
        return documents, responses

    def _store(self, filesystem: Any, current: _OpenFile, retired: _OpenFile | None, data: bytes, appendable: bool,
               key: tuple[str, str], root: str, documents: list[bytes],
               responses: list[tuple[str, str, str, WaitingResponse]]) -> bool:
        """In the writer's thread: the batch's bytes into its file, then its rows journalled (or inserted). False,
        nothing written, when the file was deleted under its handle since its last batch (a clean-up or an operator:
        appends would go to no name): the caller makes the batch again for a new file."""
        if retired is not None:
            retired.close()
        if current.deleted():
            current.close()
            return False
        try:
            self._write(filesystem, current, data, appendable)
        except BaseException:  # whatever broke the write, the file's tail is unknown: never appended to again
            current.close()  # (out of _open since _current_file) the next batch starts a file of its own
            raise
        current.size += len(data)
        if appendable:
            with self._lock:
                self._keep_open(key, current)
        self.rows.write(root if appendable else None, documents, responses)
        return True

    def _filesystem(self, location: str, connection_id: str | None) -> tuple[Any, str, bool]:
        """The location's filesystem, its root, and whether it is a local disk (appended to, rows journalled)."""
        key = (location, connection_id)
        if key not in self._filesystems:
            filesystem, root = resolve_filesystem(location, connection_id)
            self._filesystems[key] = (filesystem, root, _is_local(filesystem))
        return self._filesystems[key]

    def _new_file_path(self, root: str, source: str, run_id: str) -> str:
        self._sequence += 1
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
        host = socket.gethostname().split(".", 1)[0] or "host"
        run = "".join(character if character.isalnum() or character in "-_." else "_" for character in run_id)
        run = "_" if run.strip(".") == "" else run  # never "." or "..": a run's folder stays under its source
        name = f"{stamp}-{host}-{os.getpid()}-{self._sequence}{WARC_SUFFIX}"
        return f"{root.rstrip('/')}/{source}/{run or 'manual'}/{name}"

    def _keep_open(self, key: tuple[str, str], current: _OpenFile) -> None:
        """``current`` is the run's file for its next batch, last used; past :data:`OPEN_FILES_KEPT` the file
        used longest ago is closed and forgotten (its run's next batch, if any, starts a file of its own)."""
        self._open[key] = current
        while len(self._open) > OPEN_FILES_KEPT:
            self._open.pop(next(iter(self._open))).close()

    @staticmethod
    def _write(filesystem: Any, current: _OpenFile, data: bytes, local: bool) -> None:
        """Append (a local file) or write (a new object) ``data``; a local append that fails is cut back to the
        file's last whole record, so what follows still reads. A local file is written through its own handle,
        unbuffered (each batch's bytes reach the file before its rows are journalled), opened with the file and kept
        open between batches: fsspec's wrapper and a ``makedirs`` a batch were 4 % of the archive's CPU, opening and
        closing the file 5 % more."""
        if not local:
            with filesystem.open(current.path, "wb") as handle:
                handle.write(data)
            return
        if current.handle is None:
            filesystem.makedirs(current.path.rsplit("/", 1)[0], exist_ok=True)
            current.handle = open(current.path, "ab", buffering=0)  # noqa: SIM115 (kept open: _OpenFile.close)
        try:
            write_fully(current.handle, data)
        except OSError:
            with contextlib.suppress(OSError):  # the write's own error is the one to report
                os.ftruncate(current.handle.fileno(), current.size)
            raise

    def close(self) -> None:
        """Flush the rows waiting (what is not flushed stays in the journal, for the next writer), then stop."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        hanging = self._pending is not None and not self._pending.finished  # never wait behind a write that hangs
        if self._thread is not None:
            if not hanging:
                self.flush()
            self._thread.stop()
            self._thread = None
        if not hanging:  # (a hanging write holds the lock; its process is going anyway)
            with self._lock:
                for current in self._open.values():
                    current.close()
                self._open.clear()
            self.rows.close()
            if self.archived_digests is not None:
                self.archived_digests.close()


def archive_location(source: SourceConfig, default_location: str) -> str:
    """Where a source's archive is: its ``output.archive.location``, else the default (``HARVESTER_ARCHIVE_LOCATION``),
    without a trailing slash (the files' URLs are made and matched under it)."""
    return (source.output.archive.location or default_location).rstrip("/")


def _is_local(filesystem: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(filesystem, LocalFileSystem)


def file_url(location: str, root: str, path: str) -> str:
    """The file's URL, under the location's scheme (what a reader opens with :func:`resolve_filesystem`)."""
    scheme = location.split("://", 1)[0]
    if scheme == "file":
        return "file://" + path
    return f"{scheme}://{path.lstrip('/')}"
