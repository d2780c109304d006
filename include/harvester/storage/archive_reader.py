"""Reading archived pages back: one record from its file, offset and length (what the index points at).

Re-extraction and replay read a page's response through here, never the site. A revisit row is read at its
original's payload (:func:`harvester.storage.archive_index.payload_of`) with the revisit's own status and date.
Only the bytes of the one record are read (a range read on an object store).
"""

from __future__ import annotations

import contextlib
import io
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

    def read(self, row: dict[str, Any]) -> ArchivedResponse | None:
        """The archived page of an index row (:func:`read_archived`)."""
        return read_archived(row, self)

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
    for record in ArchiveIterator(io.BytesIO(data)):
        if record.rec_type in ("response", "revisit") and record.http_headers is not None:
            status = int(record.http_headers.get_statuscode() or 0)
            return (status, list(record.http_headers.headers), record.content_stream().read(),
                    record.rec_headers.get_header("WARC-Target-URI") or "")
    raise ArchiveUnavailable(f"no response record in {location.file} at {location.offset}")


def read_archived(row: dict[str, Any], reader: ArchiveReader | None = None) -> ArchivedResponse | None:
    """The archived page of an index row: its payload (the original's for a revisit) with the row's own
    status. None when a revisit has no archived original (a 304 to a page archived nowhere)."""
    location = payload_of(row)
    if location is None:
        return None
    status, headers, body, _ = read_payload(location, reader)
    if row.get("record") == "revisit" and row.get("status") != 304:
        status = int(row.get("status") or status)
    elif row.get("record") == "revisit":
        status = 200  # not modified: the page is the original's, as the site confirmed
    return ArchivedResponse(row["url"], row.get("final_url") or row["url"], status, headers, body, row["time"],
                            row.get("run", ""))
