"""A batch's WARC/1.1 records written by hand (request, response, revisit; gzip per record), with the digests, dates
and record ids they carry: the bytes :class:`harvester.storage.archive.ArchiveWriter` appends to an archive file.

Why not warcio's builder and writer (warcio writes the files' ``warcinfo`` records and reads everything back):
they cost about as much CPU as the rest of the archive path together. The records here are the same bytes,
checked by ``warcio check`` and read back by warcio in tests/workers/test_archive_records.py.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, NamedTuple

from warcio.warcwriter import WARCWriter

from harvester.storage.archive_index import Original


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


REDACTED = "[redacted]"
SECRET_REQUEST_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key", "x-auth-token"})
SECRET_RESPONSE_HEADERS = frozenset({"set-cookie", "set-cookie2"})
# The payload kept is the decoded one (what the page was read from), so these no longer describe it.
ENCODING_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})
REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
REVISIT_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"


def payload_digest(body: bytes) -> str:
    """The WARC payload digest, as warcio and the web archives write it: ``sha1:`` and base32."""
    return labelled_sha1(hashlib.sha1(body).digest())


def labelled_sha1(raw_digest: bytes) -> str:
    """A SHA-1 already computed as the WARC digest of :func:`payload_digest` (the writer keeps the raw bytes too,
    for the payload filter)."""
    return "sha1:" + sha1_base32(raw_digest)


_BASE32_ALPHABET = bytes.maketrans(bytes(range(32)), b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")


def _spreading_masks() -> tuple[tuple[int, int, int], ...]:
    """(half, shift, mask) of each halving of :func:`sha1_base32`: chunks of ``2 * half`` bits, each in a slot of
    ``2 * shift`` bits of a 256-bit number, are cut in two, the upper half moved up ``shift`` bits (``mask``: the
    lower half of each slot's chunk)."""
    steps, chunk, slot = [], 160, 256
    while chunk > 5:
        half, shift = chunk // 2, slot // 2
        steps.append((half, shift, sum(((1 << half) - 1) << start for start in range(0, 256, slot))))
        chunk, slot = half, shift
    return tuple(steps)


_SPREADING = _spreading_masks()  # 160 -> 2 x 80 -> 4 x 40 -> 8 x 20 -> 16 x 10 -> 32 x 5 bits, each in a byte


def sha1_base32(digest: bytes) -> str:
    """``base64.b32encode(digest).decode()`` for a 20-byte SHA-1 (160 bits: 32 characters, no padding). Python
    3.11's ``b32encode`` is pure Python (2.5 µs a digest, three digests a page); here the 160 bits are spread five
    to a byte by five halvings of one integer (each a few operations in C), then the bytes are translated to the
    alphabet: 1.0 µs (a table of 10-bit pairs took 1.75, measured 2026-12-06)."""
    value = int.from_bytes(digest, "big")
    for half, shift, mask in _SPREADING:
        value = (value & mask) | ((value >> half) & mask) << shift
    return value.to_bytes(32, "big").translate(_BASE32_ALPHABET).decode()


def redacted_request(headers: tuple[tuple[str, str], ...], secret_names: frozenset[str]) -> list[tuple[str, str]]:
    """The request's headers with every credential's value replaced: the names stay (what was sent is known,
    never its secret)."""
    secret = SECRET_REQUEST_HEADERS | secret_names
    return [(name, REDACTED if name.lower() in secret else value) for name, value in headers]


@functools.lru_cache(maxsize=256)
def request_header_block(headers: tuple[tuple[str, str], ...], secret_names: frozenset[str]) -> bytes:
    """The request record's headers after its first line (CRLF first, the empty line last), credentials redacted:
    made once per set of headers. A source sends the same headers with every page (the fetcher's, the source's
    and its connection's), so its pages share one block: redacting and joining them was a tenth of a record's
    Python (measured 2026-12-06)."""
    return http_head("", redacted_request(headers, secret_names))


# A response header the record changes (its value redacted, its name kept apart, or dropped): the others are kept as
# they came, with one set lookup each.
_CHANGED_RESPONSE_HEADERS = SECRET_RESPONSE_HEADERS | ENCODING_HEADERS


def archived_response_head(status_line: str, headers: tuple[tuple[str, str], ...], body_length: int) -> bytes:
    """The response's head for the record: the status line, the headers with cookies redacted and the encodings
    dropped (the payload kept is decoded; the original encoding is named in ``X-Archive-Orig-Content-Encoding``),
    a true Content-Length, the empty line. One pass from the transport's pairs to the header lines: a list of
    pairs, then of lines, then the head took 6.7 µs of a page's 47 under load, one pass 4.0 (measured 2026-12-07)."""
    lines = [status_line]
    for name, value in headers:
        lowered = name.lower()
        if lowered not in _CHANGED_RESPONSE_HEADERS:
            lines.append(f"{name}: {value}")
        elif lowered in SECRET_RESPONSE_HEADERS:
            lines.append(f"{name}: {REDACTED}")
        elif lowered == "content-encoding":
            lines.append(f"X-Archive-Orig-Content-Encoding: {value}")
    lines.append(f"Content-Length: {body_length}")
    return head_bytes(lines)


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


class PlacedRecord(NamedTuple):
    """Where a page's response (or revisit) record is in its batch, and what names it."""

    kind: str  # response or revisit
    offset: int
    length: int
    record_id: str  # its WARC-Record-ID's URI (``urn:uuid:...``, without the angle brackets)


class WarcBatch:
    """The WARC bytes of one batch, with each record's offset and length in them (the index's).

    Records are serialised here rather than through warcio's builder and writer, because those cost about as
    much CPU as the rest of the archive path together (they hash the payload again, once per digest, in
    Python-level chunks, and rebuild the headers several times); the bytes are the same WARC/1.1 records,
    each one gzip member, that warcio reads and ``warcio check`` verifies (tests/workers/test_archive.py).
    The payload's SHA-1 is computed once, by the caller, and serves both the index and the record."""

    def __init__(self, source: str, file_name: str, first_in_file: bool, pages: int = 1) -> None:
        self.source = source
        self.parts: list[bytes] = []  # each record's gzip member, in order
        self.size = 0
        self._ids = record_ids(2 * pages)  # a response's and a request's for each page (more are drawn if needed)
        if first_in_file:  # once per file: warcio's own warcinfo record
            buffer = io.BytesIO()
            writer = WARCWriter(buffer, gzip=True, warc_version="1.1")
            writer.write_record(writer.create_warcinfo_record(file_name, {
                "software": "Harvester (warcio)", "format": "WARC File Format 1.1",
                "isPartOf": source}))
            self.parts.append(buffer.getvalue())
            self.size = len(self.parts[0])

    def add(self, page: ArchivedPage, digest: str, original: Original | None) -> PlacedRecord:
        """Write the page's response (or revisit) record and its request record; where the first record is in the
        batch. ``digest`` is :func:`payload_digest` of the body.

        Each record's WARC head is one f-string: its values are this module's own (dates, ids, digests) but for
        the URLs, which are kept on one line (:func:`_header_text`); building header lists and joining them was a
        third of a record's Python (measured 2026-12-06)."""
        exchange = page.exchange
        body, status = exchange.body, exchange.status
        date = warc_date(page.fetched_at)
        url = _header_text(exchange.url)
        protocol = exchange.http_version or "HTTP/1.1"
        response_head = archived_response_head(f"{protocol} {status} {_reason_phrase(status)}",
                                               exchange.response_headers, len(body))
        record_id, request_id = (self._ids.pop(), self._ids.pop()) if len(self._ids) >= 2 else record_ids(2)
        block_hash = hashlib.sha1(response_head)
        if original is not None or status == 304:
            # one profile header; a 304 of a page archived nowhere is still a revisit, of nothing this archive
            # holds: it names no original
            kind, block_length, payload = "revisit", len(response_head), b""
            revisit = f"WARC-Profile: {REVISIT_NOT_MODIFIED if status == 304 else REVISIT_IDENTICAL}\r\n"
            if original is not None:
                revisit += (f"WARC-Refers-To-Target-URI: {_header_text(original.uri)}\r\n"
                            f"WARC-Refers-To-Date: {original.date}\r\n")
        else:
            kind, block_length, payload, revisit = "response", len(response_head) + len(body), body, ""
            block_hash.update(body)
        head = (f"WARC/1.1\r\nWARC-Type: {kind}\r\nWARC-Date: {date}\r\nWARC-Target-URI: {url}\r\n"
                f"WARC-Record-ID: {record_id}\r\n{revisit}WARC-Payload-Digest: {digest}\r\n"
                f"WARC-Block-Digest: sha1:{sha1_base32(block_hash.digest())}\r\n"
                f"Content-Type: application/http; msgtype=response\r\nContent-Length: {block_length}\r\n\r\n")
        response = gzip_member(b"".join((head.encode("utf-8", "replace"), response_head, payload, b"\r\n\r\n")))
        request_head = (_header_text(f"{request_line(exchange.url, exchange.method)} {protocol}")
                        .encode("utf-8", "replace")
                        + request_header_block(exchange.request_headers, exchange.credential_header_names))
        head = (f"WARC/1.1\r\nWARC-Type: request\r\nWARC-Date: {date}\r\nWARC-Target-URI: {url}\r\n"
                f"WARC-Record-ID: {request_id}\r\nWARC-Concurrent-To: {record_id}\r\n"
                f"WARC-Block-Digest: sha1:{sha1_base32(hashlib.sha1(request_head).digest())}\r\n"
                f"Content-Type: application/http; msgtype=request\r\nContent-Length: {len(request_head)}\r\n\r\n")
        request = gzip_member(b"".join((head.encode("utf-8", "replace"), request_head, b"\r\n\r\n")),
                              REQUEST_GZIP_LEVEL)
        offset = self.size
        self.parts += (response, request)
        self.size += len(response) + len(request)
        return PlacedRecord(kind, offset, len(response), record_id[1:-1])

    def data(self) -> bytes:
        """The batch's bytes: the warcinfo record (a file's first batch), then each page's records."""
        return b"".join(self.parts)


def new_record_id(random_hex: str | None = None) -> str:
    """A random (version 4) UUID URN, as ``uuid.uuid4()`` gives, from 16 bytes of ``os.urandom`` (or the 32 hex
    digits of them given: a batch draws its records' bytes in one call) without building a ``UUID`` (fork-safe:
    nothing is kept between calls)."""
    text = os.urandom(16).hex() if random_hex is None else random_hex
    return (f"<urn:uuid:{text[:8]}-{text[8:12]}-4{text[13:16]}-{_UUID_VARIANT[text[16]]}{text[17:20]}-"
            f"{text[20:]}>")


def record_ids(count: int) -> list[str]:
    """``count`` record ids from one ``os.urandom`` call (a system call a record cost 1-2 µs)."""
    text = os.urandom(16 * count).hex()
    return [new_record_id(text[start:start + 32]) for start in range(0, 32 * count, 32)]


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
    return head_bytes([first_line, *(f"{name}: {value}" for name, value in headers)])


def head_bytes(lines: list[str]) -> bytes:
    """A head's lines (the first line, then ``Name: value``) as the record's bytes, the empty line after them."""
    return (header_lines(lines) + "\r\n\r\n").encode("utf-8", "replace")


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
