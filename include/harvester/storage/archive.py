"""Every fetched response kept as WARC/1.1 (DESIGN.md section 16): what the site said, to re-extract and replay.

A source with ``output.archive`` gets, per fetched page, a ``response`` record (or a ``revisit`` record when the
site answered 304, or when the same payload is already archived for the source: the index says so) and the
``request`` record that produced it, written with warcio, gzip per record (each record is readable on its own
from the index's offset and length). Credentials never reach the archive: the request's ``Authorization``,
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
import functools
import hashlib
import io
import logging
import os
import socket
import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from warcio.warcwriter import WARCWriter

from harvester.config import SourceConfig
from harvester.connections import resolve_filesystem
from harvester.errors import ArchiveUnavailable, StorageError
from harvester.settings import HarvesterSettings
from harvester.storage.archive_index import ArchiveIndex, IndexEntry, Original
from harvester.storage.archive_journal import RowsBehind, WaitingResponse

log = logging.getLogger(__name__)

REDACTED = "[redacted]"
SECRET_REQUEST_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key", "x-auth-token"})
SECRET_RESPONSE_HEADERS = frozenset({"set-cookie", "set-cookie2"})
# The payload kept is the decoded one (what the page was read from), so these no longer describe it.
ENCODING_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})
WARC_SUFFIX = ".warc.gz"
REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
REVISIT_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"


@dataclass(slots=True)
class ArchivedPage:
    """One fetched page to archive: its task, run and the exchange the fetcher kept (:class:`Exchange` of
    :mod:`harvester.scraping`, read by attribute so storage does not import the fetcher's room). Not frozen: a
    frozen dataclass sets each field through ``object.__setattr__``, 1.6 against 0.3 µs a page; nothing changes
    one after it is made."""

    task_id: str
    run_id: str
    url: str  # the task's URL (what re-extraction looks a page up by); the exchange has the final one
    exchange: Any
    fetched_at: datetime
    kind: str = "details"  # the task's kind and depth: re-extraction reads the page as its task did
    depth: int = 0


def payload_digest(body: bytes) -> str:
    """The WARC payload digest, as warcio and the web archives write it: ``sha1:`` and base32."""
    return "sha1:" + sha1_base32(hashlib.sha1(body).digest())


_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_BASE32_PAIRS = tuple(first + second for first in _BASE32 for second in _BASE32)  # 10 bits -> 2 characters


def sha1_base32(digest: bytes) -> str:
    """``base64.b32encode(digest).decode()`` for a 20-byte SHA-1 (160 bits: 32 characters, no padding), in 16
    lookups of 10 bits: Python 3.11's ``b32encode`` is pure Python, 2-3 µs a digest, three digests a page."""
    value = int.from_bytes(digest, "big")
    return "".join([_BASE32_PAIRS[(value >> shift) & 0x3FF] for shift in range(150, -1, -10)])


def redacted_request(headers: tuple[tuple[str, str], ...], secret_names: frozenset[str]) -> list[tuple[str, str]]:
    """The request's headers with every credential's value replaced: the names stay (what was sent is known,
    never its secret)."""
    secret = SECRET_REQUEST_HEADERS | secret_names
    return [(name, REDACTED if name.lower() in secret else value) for name, value in headers]


def archived_response_headers(headers: tuple[tuple[str, str], ...], body_length: int) -> list[tuple[str, str]]:
    """The response's headers for the record: cookies redacted, the encodings dropped (the payload kept is
    decoded; the original encoding is named in ``X-Archive-Orig-Content-Encoding``), a true Content-Length."""
    kept: list[tuple[str, str]] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered in SECRET_RESPONSE_HEADERS:
            kept.append((name, REDACTED))
        elif lowered == "content-encoding":
            kept.append(("X-Archive-Orig-Content-Encoding", value))
        elif lowered not in ENCODING_HEADERS:
            kept.append((name, value))
    kept.append(("Content-Length", str(body_length)))
    return kept


def warc_date(moment: datetime) -> str:
    """WARC/1.1 dates carry microseconds. The text up to the second is formatted once per second (a batch's pages
    were fetched within a few): ``strftime`` was a tenth of a record's Python."""
    moment = moment.astimezone(UTC) if moment.tzinfo is not UTC else moment
    return f"{_warc_second(moment.replace(microsecond=0))}.{moment.microsecond:06d}Z"


@functools.lru_cache(maxsize=64)
def _warc_second(second: datetime) -> str:
    return second.strftime("%Y-%m-%dT%H:%M:%S")


def request_line(url: str, method: str = "GET") -> str:
    """The request line's method and target (the protocol follows): the URL's path and query, as ``urlsplit``
    gives them, found with three ``find``s (``urlsplit`` was 2-3 µs a page) in a URL the fetcher canonicalised."""
    start = url.find("://")
    start = start + 3 if start >= 0 else 0
    end = url.find("#", start)
    end = len(url) if end < 0 else end
    slash, question = url.find("/", start, end), url.find("?", start, end)
    path_at = end if slash < 0 and question < 0 else slash if question < 0 or 0 <= slash < question else question
    target = url[path_at:end].removesuffix("?")
    return f"{method or 'GET'} " + (target if target.startswith("/") else "/" + target)


ARCHIVE_GZIP_LEVEL = 1  # measured on 4.4 KB of HTML: 17 µs a record against 30 µs at zlib's default 6, 5 % more bytes
GZIP_WBITS = 31  # deflate with a gzip header and trailer, 32 KiB window
# A request record (about 0.5 KB, never what a reader looks up) with ISA-L's level 0: level 1 sets up ~6 µs of
# state whatever the size, level 0 1.2 µs, for about 130 bytes more a page (322 against 454 bytes for a demo
# page's request, measured 2026-12-06): 10 % of a demo page's archive, 1 % of a real page's.
REQUEST_GZIP_LEVEL = 0
try:  # ISA-L's deflate (python-isal): the same gzip members, in about half zlib's CPU (gzip_member)
    from isal import isal_zlib as ISAL_DEFLATE
except ImportError:  # an install without it: zlib
    ISAL_DEFLATE = None


class WarcBatch:
    """The WARC bytes of one batch, with each record's offset and length in them (the index's).

    Records are serialised here rather than through warcio's builder and writer, because those cost about as
    much CPU as the rest of the archive path together (they hash the payload again, once per digest, in
    Python-level chunks, and rebuild the headers several times); the bytes are the same WARC/1.1 records,
    each one gzip member, that warcio reads and ``warcio check`` verifies (tests/workers/test_archive.py).
    The payload's SHA-1 is computed once, by the caller, and serves both the index and the record."""

    def __init__(self, source: str, file_name: str, first_in_file: bool) -> None:
        self.buffer = io.BytesIO()
        self.source = source
        if first_in_file:  # once per file: warcio's own warcinfo record
            writer = WARCWriter(self.buffer, gzip=True, warc_version="1.1")
            writer.write_record(writer.create_warcinfo_record(file_name, {
                "software": "Harvester (warcio)", "format": "WARC File Format 1.1",
                "isPartOf": source}))

    def add(self, page: ArchivedPage, digest: str, original: Original | None) -> tuple[str, int, int]:
        """Write the page's response (or revisit) record and its request record; the kind of the first record,
        and its offset and length in the batch. ``digest`` is :func:`payload_digest` of the body."""
        exchange = page.exchange
        date = warc_date(page.fetched_at)
        protocol = exchange.http_version or "HTTP/1.1"
        response_head = http_head(f"{protocol} {exchange.status} {_reason_phrase(exchange.status)}",
                                  archived_response_headers(exchange.response_headers, len(exchange.body)))
        record_id = new_record_id()
        warc_headers = [("WARC-Date", date), ("WARC-Target-URI", exchange.url), ("WARC-Record-ID", record_id)]
        if original is not None or exchange.status == 304:
            # one profile header; a 304 of a page archived nowhere is still a revisit, of nothing this archive
            # holds: it names no original
            kind = "revisit"
            warc_headers.append(("WARC-Profile",
                                 REVISIT_NOT_MODIFIED if exchange.status == 304 else REVISIT_IDENTICAL))
            if original is not None:
                warc_headers += [("WARC-Refers-To-Target-URI", original.uri), ("WARC-Refers-To-Date", original.date)]
            block: tuple[bytes, ...] = (response_head,)
        else:
            kind = "response"
            block = (response_head, exchange.body)
        warc_headers.append(("WARC-Payload-Digest", digest))
        offset = self.buffer.tell()
        self.buffer.write(gzip_member(warc_record(kind, warc_headers, "application/http; msgtype=response", block)))
        length = self.buffer.tell() - offset
        request_head = http_head(
            f"{request_line(exchange.url, exchange.method)} {protocol}",
            redacted_request(exchange.request_headers, exchange.credential_header_names))
        self.buffer.write(gzip_member(warc_record("request", [
            ("WARC-Date", date), ("WARC-Target-URI", exchange.url), ("WARC-Record-ID", new_record_id()),
            ("WARC-Concurrent-To", record_id)], "application/http; msgtype=request", (request_head,)),
            REQUEST_GZIP_LEVEL))
        return kind, offset, length


def new_record_id() -> str:
    """A random (version 4) UUID URN, as ``uuid.uuid4()`` gives, from 16 bytes of ``os.urandom`` without building
    a ``UUID`` (fork-safe: nothing is kept between calls)."""
    text = os.urandom(16).hex()
    return (f"<urn:uuid:{text[:8]}-{text[8:12]}-4{text[13:16]}-{_UUID_VARIANT[text[16]]}{text[17:20]}-"
            f"{text[20:]}>")


_UUID_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}  # RFC 4122's variant bits


def _header_text(value: str) -> str:
    """A header value on one line (a value with a line break would end the header block early)."""
    return value.replace("\r", " ").replace("\n", " ") if "\r" in value or "\n" in value else value


def header_lines(lines: list[str]) -> str:
    """``lines`` joined by CRLF, each kept on one line: joined first, and only when the text holds a line break
    of a line's own (more breaks than the joins) is each line cleaned, so a header costs one join, not two scans."""
    text = "\r\n".join(lines)
    if text.count("\n") != len(lines) - 1 or text.count("\r") != len(lines) - 1:
        text = "\r\n".join(_header_text(line) for line in lines)
    return text


def http_head(first_line: str, headers: list[tuple[str, str]]) -> bytes:
    """An HTTP message's head as the record keeps it: the first line, the headers, the empty line."""
    text = header_lines([first_line, *(f"{name}: {value}" for name, value in headers)])
    return (text + "\r\n\r\n").encode("utf-8", "replace")


def warc_record(kind: str, headers: list[tuple[str, str]], content_type: str, block: tuple[bytes, ...]) -> bytes:
    """One WARC/1.1 record: the WARC headers with the block's digest, type and length, then the block."""
    block_hash = hashlib.sha1()
    length = 0
    for part in block:
        block_hash.update(part)
        length += len(part)
    head = header_lines([f"WARC-Type: {kind}", *(f"{name}: {value}" for name, value in headers),
                         f"WARC-Block-Digest: sha1:{sha1_base32(block_hash.digest())}",
                         f"Content-Type: {content_type}", f"Content-Length: {length}"])
    return b"".join((b"WARC/1.1\r\n", head.encode("utf-8", "replace"), b"\r\n\r\n", *block, b"\r\n\r\n"))


def gzip_member(data: bytes, isal_level: int = ARCHIVE_GZIP_LEVEL) -> bytes:
    """``data`` as one gzip member: each record decompresses on its own from the index's offset.

    With python-isal (ISA-L's deflate, pinned in the requirements) at its level 1: 7.7 µs for a demo page's
    1.4 KB response record against 13 µs for zlib's level 1, 5 against 7 µs for its request, as many bytes
    (measured 2026-12-06). Without it, zlib, the window sized to the record (never smaller than the data, so
    nothing compresses worse): zlib's default state is about 260 KiB, above glibc's mmap threshold, so each
    default compressor costs fresh pages of memory, measured at 60-70 µs a record against 14 µs for a 900-byte
    page with a fitted window. ``isal_level`` is ISA-L's (0 for a request record); zlib always uses its level 1
    (its level 0 stores the data uncompressed)."""
    if ISAL_DEFLATE is not None:
        return ISAL_DEFLATE.compress(data, isal_level, GZIP_WBITS)
    window_bits = max(9, min(15, (len(data) - 1).bit_length()))
    compressor = zlib.compressobj(ARCHIVE_GZIP_LEVEL, zlib.DEFLATED, window_bits | 16, max(1, min(8, window_bits - 7)))
    return compressor.compress(data) + compressor.flush()


@functools.cache
def _reason_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


@dataclass
class _OpenFile:
    path: str
    size: int


class ArchiveWriter:
    """Writes one batch's pages of one source as WARC records and indexes them (one per worker process)."""

    def __init__(self, index: ArchiveIndex, default_location: str, write_timeout_seconds: float = 30.0,
                 index_flush_seconds: float = 0.0) -> None:
        self.index = index
        self.rows = RowsBehind(index, index_flush_seconds)  # the index's rows: written behind, or with each batch
        self._flush_timer: threading.Timer | None = None
        self.default_location = default_location.rstrip("/")
        self.write_timeout_seconds = write_timeout_seconds
        self._open: dict[tuple[str, str], _OpenFile] = {}  # (source, run) -> this process's current local file
        self._sequence = 0
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future[int] | None = None  # the last write, which may still hang past its timeout
        # a location's filesystem, resolved once per process: resolving it for every batch (fsspec's registry, or
        # Airflow's connection lookup inside Airflow) was 3 % of the archive's CPU
        self._filesystems: dict[tuple[str, str | None], tuple[Any, str, bool]] = {}

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> ArchiveWriter:
        return cls(ArchiveIndex.from_settings(settings), settings.archive_location,
                   settings.archive_write_timeout_seconds, settings.archive_index_flush_seconds)

    def location_of(self, source: SourceConfig) -> str:
        return source.output.archive.location or self.default_location

    def archive(self, source: SourceConfig, pages: list[ArchivedPage]) -> int:
        """Write and index ``pages`` (grouped by run); the number of pages archived. Raises
        :class:`ArchiveUnavailable` when the files or the index could not be written in time."""
        by_run: dict[str, list[ArchivedPage]] = {}
        for page in pages:
            by_run.setdefault(page.run_id, []).append(page)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harvester-archive")
        written = 0
        for run_id, run_pages in by_run.items():
            if self._pending is not None and not self._pending.done():  # a write still hangs: never queue behind it
                raise ArchiveUnavailable(f"the archive at {self.location_of(source)} has not finished an earlier "
                                         "write: this batch is not archived")
            future = self._pending = self._executor.submit(self._archive_run, source, run_id, run_pages)
            try:
                written += future.result(timeout=self.write_timeout_seconds)
            except FutureTimeout:
                raise ArchiveUnavailable(f"the archive at {self.location_of(source)} did not answer within "
                                         f"{self.write_timeout_seconds:g}s") from None
            except StorageError as error:  # the index (MongoDB): one kind of archive failure
                raise ArchiveUnavailable(f"archive index: {error}") from error
            except (OSError, ValueError, RuntimeError) as error:  # fsspec's backends raise these (a full disk,
                raise ArchiveUnavailable(  # a refused bucket, a dead mount)
                    f"writing the archive at {self.location_of(source)} failed: {type(error).__name__}: {error}"
                ) from error
        self._arm_flush()
        return written

    def _arm_flush(self) -> None:
        """Rows waiting reach the index within ``archive_index_flush_seconds`` even when no batch follows (an idle
        worker): a timer hands a flush to the writer's thread, which re-arms it while rows still wait."""
        if self._flush_timer is None and self.rows.pending.documents:
            timer = self._flush_timer = threading.Timer(self.rows.flush_seconds, self._flush_later)
            timer.daemon = True
            timer.start()

    def _flush_later(self) -> None:
        self._flush_timer = None
        executor = self._executor
        if executor is not None:
            with contextlib.suppress(RuntimeError):  # the writer closed meanwhile (and flushed)
                executor.submit(self._flush_due)

    def _flush_due(self) -> None:
        try:
            if self.rows.pending.due(self.rows.flush_seconds):
                self.rows.flush()
        finally:  # whatever happened, rows still waiting get another timer
            self._arm_flush()

    def flush(self) -> bool:
        """Every row waiting into the index now, in the writer's thread (after the batches before it); False when
        the index refused them or did not answer within ``archive_write_timeout_seconds`` (they still wait)."""
        if self._executor is None or not self.rows.pending.documents:
            return True
        try:
            return self._executor.submit(self.rows.flush).result(timeout=self.write_timeout_seconds)
        except FutureTimeout:
            return False

    def _archive_run(self, source: SourceConfig, run_id: str, pages: list[ArchivedPage]) -> int:
        settings = source.output.archive
        location = self.location_of(source)
        filesystem, root, appendable = self._filesystem(location, settings.connection_id)
        digests = [payload_digest(page.exchange.body) for page in pages]
        originals = self.rows.originals(source.name, [
            (page.url, digest, page.exchange.status == 304) for page, digest in zip(pages, digests, strict=True)])
        with self._lock:
            current = self._open.get((source.name, run_id)) if appendable else None
            if current is not None and current.size >= settings.max_file_mb * 1024 * 1024:
                current = None  # rotated: the next batch starts a new file
            if current is None:
                current = _OpenFile(self._new_file_path(root, source.name, run_id), 0)
            batch = WarcBatch(source.name, current.path.rsplit("/", 1)[-1], current.size == 0)
            placed = [batch.add(page, digest, originals.get(index))
                      for index, (page, digest) in enumerate(zip(pages, digests, strict=True))]
            data = batch.buffer.getvalue()
            try:
                self._write(filesystem, current, data)
            except BaseException:  # whatever broke the write, the file's tail is unknown: never appended to again
                self._open.pop((source.name, run_id), None)  # the next batch starts a file of its own
                raise
            start = current.size
            current.size += len(data)
            if appendable:
                self._open[(source.name, run_id)] = current
        archived_file = file_url(location, root, current.path)
        documents: list[bytes] = []
        responses: list[tuple[str, str, str, WaitingResponse]] = []  # what a lookup may find before a flush
        for index, (page, digest, (kind, offset, length)) in enumerate(zip(pages, digests, placed, strict=True)):
            entry = IndexEntry(
                source=source.name, run=page.run_id, task_id=page.task_id, url=page.url, final_url=page.exchange.url,
                time=page.fetched_at, file=archived_file, offset=start + offset, length=length, digest=digest,
                status=page.exchange.status, record=kind, connection_id=settings.connection_id, kind=page.kind,
                depth=page.depth,
                payload=(originals[index].payload if kind == "revisit" and index in originals else None))
            documents.append(entry.encoded())
            if kind == "response":
                responses.append((source.name, page.url, digest, (
                    page.exchange.url, page.fetched_at, archived_file, start + offset, length, settings.connection_id)))
        self.rows.write(root if appendable else None, documents, responses)
        return len(documents)

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

    @staticmethod
    def _write(filesystem: Any, current: _OpenFile, data: bytes) -> None:
        """Append (a local file) or write (a new object) ``data``; a local append that fails is cut back to the
        file's last whole record, so what follows still reads. The folder is made with the file (an append's
        file, and so its folder, exists), and an append opens the local file directly: fsspec's wrapper and a
        ``makedirs`` for every batch were 4 % of the archive's CPU."""
        if current.size == 0:
            filesystem.makedirs(current.path.rsplit("/", 1)[0], exist_ok=True)
            with filesystem.open(current.path, "wb") as handle:
                handle.write(data)
            return
        try:
            with open(current.path, "ab") as handle:  # only local files are appended to (_is_local)
                handle.write(data)
        except OSError:
            with open(current.path, "r+b") as handle:  # a local file (only those are appended to)
                handle.truncate(current.size)
            raise

    def close(self) -> None:
        """Flush the rows waiting (what is not flushed stays in the journal, for the next writer), then stop."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._executor is not None:
            if self._pending is None or self._pending.done():  # never wait behind a write that hangs
                self.flush()
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _is_local(filesystem: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(filesystem, LocalFileSystem)


def file_url(location: str, root: str, path: str) -> str:
    """The file's URL, under the location's scheme (what a reader opens with :func:`resolve_filesystem`)."""
    scheme = location.split("://", 1)[0]
    if scheme == "file":
        return "file://" + path
    return f"{scheme}://{path.lstrip('/')}"
