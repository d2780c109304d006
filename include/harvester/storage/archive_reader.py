"""Reading archived pages back: one record from its file, offset and length (what the index points at).

Re-extraction and replay read a page's response through here, never the site. A revisit row is read at its
original's payload (:func:`harvester.storage.archive_index.payload_of`) with the revisit's own status and date.
Only the bytes of the one record are read (a range read on an object store). Re-extraction reads many pages at
once (:meth:`ArchiveReader.read_many`): one read per file, from its first needed record to the end of its last,
and each record decoded straight from its gzip member (warcio's reader for any record of another shape).
"""

from __future__ import annotations

import contextlib
import io
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from harvester.connections import resolve_filesystem
from harvester.errors import ArchiveUnavailable
from harvester.storage.archive_index import PayloadLocation, payload_of


@dataclass(frozen=True)
class ArchivedResponse:
    """A page as the site answered it: the URL, status, headers and the (decoded) body."""

    url: str
    final_url: str
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    time: datetime
    run: str

    @property
    def content_type(self) -> str:
        return next((value for name, value in self.headers if name.lower() == "content-type"), "")


class ArchiveReader:
    """Reads records, keeping the last few files open: a re-extraction reads the records of one file one after
    the other, and opening the file (an object's metadata request on a store) for each would cost more than
    the read."""

    def __init__(self, open_files: int = 8) -> None:
        self.open_files = open_files
        self._handles: OrderedDict[str, Any] = OrderedDict()

    def __enter__(self) -> ArchiveReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def bytes_at(self, location: PayloadLocation) -> bytes:
        try:
            handle = self._handles.get(location.file)
            if handle is None:
                filesystem, path = resolve_filesystem(location.file, location.connection_id)
                handle = self._handles[location.file] = filesystem.open(path, "rb")
                while len(self._handles) > self.open_files:
                    self._handles.popitem(last=False)[1].close()
            self._handles.move_to_end(location.file)
            handle.seek(location.offset)
            return handle.read(location.length)
        except (OSError, ValueError) as error:
            self._forget(location.file)
            raise ArchiveUnavailable(f"reading {location.file} at {location.offset} failed: {error}") from error

    def span_at(self, file: str, connection_id: str | None, start: int, end: int) -> bytes:
        """The bytes of ``file`` from ``start`` to ``end``: one read, however many records lie between."""
        return self.bytes_at(PayloadLocation(file, start, end - start, connection_id))

    def read(self, row: dict[str, Any]) -> ArchivedResponse | None:
        """The archived page of an index row (:func:`read_archived`)."""
        return read_archived(row, self)

    def read_many(self, rows: list[dict[str, Any]]) -> list[ArchivedResponse | ArchiveUnavailable | None]:
        """The archived page of each row, in the rows' order: one read per file (the span from its first needed
        record to the end of its last), not a seek and read per record. A page that cannot be read is its
        :class:`ArchiveUnavailable` (the others are still read); None as in :func:`read_archived`."""
        results: list[ArchivedResponse | ArchiveUnavailable | None] = [None] * len(rows)
        by_file: dict[tuple[str, str | None], list[tuple[int, PayloadLocation]]] = {}
        for position, row in enumerate(rows):
            location = payload_of(row)
            if location is not None:
                by_file.setdefault((location.file, location.connection_id), []).append((position, location))
        for (file, connection_id), wanted in by_file.items():
            start = min(location.offset for _, location in wanted)
            end = max(location.offset + location.length for _, location in wanted)
            try:
                span = self.span_at(file, connection_id, start, end)
            except ArchiveUnavailable as error:
                for position, _ in wanted:
                    results[position] = error
                continue
            for position, location in wanted:
                data = span[location.offset - start: location.offset - start + location.length]
                try:
                    results[position] = archived_from(rows[position], parse_payload(data, location))
                except ArchiveUnavailable as error:
                    results[position] = error
        return results

    def _forget(self, file: str) -> None:
        handle = self._handles.pop(file, None)
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.close()

    def close(self) -> None:
        for file in list(self._handles):
            self._forget(file)


def read_payload(location: PayloadLocation, reader: ArchiveReader | None = None
                 ) -> tuple[int, list[tuple[str, str]], bytes, str]:
    """The status, headers, body and target URI of the response record at ``location``."""
    if reader is None:
        with ArchiveReader() as own:
            data = own.bytes_at(location)
    else:
        data = reader.bytes_at(location)
    return parse_payload(data, location)


def parse_payload(data: bytes, location: PayloadLocation) -> tuple[int, list[tuple[str, str]], bytes, str]:
    """The status, headers, body and target URI of the record in ``data`` (one gzip member, as the archive
    writes them); warcio's reader for any other shape (an uncompressed file, a chunked payload)."""
    quick = _parse_simple_record(data)
    if quick is not None:
        return quick
    try:
        for record in ArchiveIterator(io.BytesIO(data)):
            if record.rec_type in ("response", "revisit") and record.http_headers is not None:
                status = int(record.http_headers.get_statuscode() or 0)
                return (status, list(record.http_headers.headers), record.content_stream().read(),
                        record.rec_headers.get_header("WARC-Target-URI") or "")
    except Exception as error:  # warcio raises its own and zlib's errors on a damaged record
        raise ArchiveUnavailable(f"the record in {location.file} at {location.offset} does not read: "
                                 f"{type(error).__name__}: {error}") from error
    raise ArchiveUnavailable(f"no response record in {location.file} at {location.offset}")


def _parse_simple_record(data: bytes) -> tuple[int, list[tuple[str, str]], bytes, str] | None:
    """A gzipped response or revisit record with an HTTP head and an identity payload (what
    :class:`harvester.storage.warc_records.WarcBatch` writes), read without warcio's streams; None for anything
    else, left to warcio."""
    try:
        decompressor = zlib.decompressobj(zlib.MAX_WBITS | 16)
        record = decompressor.decompress(data)
    except zlib.error:
        return None
    if not decompressor.eof or decompressor.unused_data or not record.startswith(b"WARC/"):
        return None
    head_end = record.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    warc_headers = _header_lines(record[:head_end])
    kind = warc_headers.get("warc-type", "")
    length = warc_headers.get("content-length", "")
    if kind not in ("response", "revisit") or not length.isdigit():
        return None
    block = record[head_end + 4: head_end + 4 + int(length)]
    http_end = block.find(b"\r\n\r\n")
    if http_end < 0 or not block.startswith(b"HTTP/"):
        return None
    lines = block[:http_end].decode("utf-8", "replace").split("\r\n")
    status_text = lines[0].split(" ", 2)[1] if lines[0].count(" ") >= 1 else ""
    headers = [(name, value.strip()) for name, _, value in (line.partition(":") for line in lines[1:])]
    if not status_text.isdigit() or any(name.lower() == "transfer-encoding" for name, _ in headers):
        return None
    return int(status_text), headers, block[http_end + 4:], warc_headers.get("warc-target-uri", "")


def _header_lines(head: bytes) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in head.decode("utf-8", "replace").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return fields


def archived_from(row: dict[str, Any], payload: tuple[int, list[tuple[str, str]], bytes, str]) -> ArchivedResponse:
    """The archived page of an index row from its payload record, with the row's own status (a revisit's)."""
    status, headers, body, _ = payload
    if row.get("record") == "revisit" and row.get("status") != 304:
        status = int(row.get("status") or status)
    elif row.get("record") == "revisit":
        status = 200  # not modified: the page is the original's, as the site confirmed
    return ArchivedResponse(row["url"], row.get("final_url") or row["url"], status, headers, body, row["time"],
                            row.get("run", ""))


def read_archived(row: dict[str, Any], reader: ArchiveReader | None = None) -> ArchivedResponse | None:
    """The archived page of an index row: its payload (the original's for a revisit) with the row's own
    status. None when a revisit has no archived original (a 304 to a page archived nowhere)."""
    location = payload_of(row)
    if location is None:
        return None
    return archived_from(row, read_payload(location, reader))
