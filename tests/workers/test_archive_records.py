"""The archive's records as written by hand (no warcio builder) stay WARC that warcio reads and checks, and the
batched reader of re-extraction reads them back as the one-record reader does, a damaged record alone lost."""

from __future__ import annotations

import base64
import gzip
import hashlib
import subprocess
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from harvester.errors import ArchiveUnavailable
from harvester.scraping.fetching.page_fetcher import Exchange
from harvester.storage import ArchiveReader, read_archived, warc_records
from harvester.storage.warc_records import ArchivedPage, WarcBatch, payload_digest
from warcio.archiveiterator import ArchiveIterator

from tests.fixtures.servers import VENV_BIN

pytestmark = pytest.mark.unit
MOMENT = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)


def page(number: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> ArchivedPage:
    url = f"http://shop.test/p/{number}"
    exchange = Exchange("GET", url, (("User-Agent", "Harvester"), ("Cookie", "session=secret")), 200,
                        (("Content-Type", "text/html; charset=utf-8"), *headers), body)
    return ArchivedPage(f"task-{number}", "run-1", url, exchange, MOMENT)


def write_file(path: Path, pages: list[ArchivedPage]) -> list[dict[str, Any]]:
    """The pages as one WARC file, and the index rows pointing at their response records."""
    batch = WarcBatch("shop", path.name, first_in_file=True)
    rows = []
    for archived in pages:
        digest = payload_digest(archived.exchange.body)
        kind, offset, length, record_id = batch.add(archived, digest, None)
        rows.append({"_id": record_id, "url": archived.url, "final_url": archived.exchange.url, "record": kind,
                     "status": 200,
                     "file": f"file://{path}", "offset": offset, "length": length, "time": MOMENT, "run": "run-1"})
    path.write_bytes(batch.data())
    return rows


def test_records_pass_warcio_check_with_a_header_broken_across_lines_and_a_large_body(tmp_path: Path) -> None:
    large = b"<html>" + b"".join(b"<p>line %d of a long page</p>" % number for number in range(20_000)) + b"</html>"
    pages = [page(1, b"<html>small</html>", (("X-Note", "first\r\nInjected: yes"),)), page(2, large), page(3, b"")]
    path = tmp_path / "a.warc.gz"
    rows = write_file(path, pages)
    checked = subprocess.run([str(VENV_BIN / "warcio"), "check", "-v", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    records = [(record.rec_type, record.http_headers.get_header("Injected") if record.http_headers else None)
               for record in ArchiveIterator(path.open("rb"))]
    assert [kind for kind, _ in records] == ["warcinfo"] + ["response", "request"] * 3
    named = [record.rec_headers.get_header("WARC-Record-ID") for record in ArchiveIterator(path.open("rb"))
             if record.rec_type == "response"]
    assert named == [f"<{row['_id']}>" for row in rows]  # an index row is named by its record's id
    assert all(injected is None for _, injected in records)  # the line break did not make a header of its own
    assert b"secret" not in b"".join(record.content_stream().read() for record in ArchiveIterator(path.open("rb")))
    assert read_archived(rows[1]) is not None and read_archived(rows[1]).body == large  # type: ignore[union-attr]


def test_a_post_request_is_archived_as_a_post(tmp_path: Path) -> None:
    """A source behind POST (input.requests) keeps the method it sent in the request record's request line."""
    posted = page(9, b'{"items": []}')
    posted = ArchivedPage(posted.task_id, posted.run_id, posted.url, Exchange(
        "POST", "http://shop.test/api?page=2", posted.exchange.request_headers, 200,
        (("Content-Type", "application/json"),), b'{"items": []}'), MOMENT)
    path = tmp_path / "post.warc.gz"
    write_file(path, [posted])
    requests = [record.http_headers.protocol + " " + record.http_headers.statusline
                for record in ArchiveIterator(path.open("rb")) if record.rec_type == "request"]
    assert requests == ["POST /api?page=2 HTTP/1.1"]


def test_reading_many_rows_reads_what_each_row_reads_alone_and_a_damaged_record_alone_fails(tmp_path: Path) -> None:
    first = write_file(tmp_path / "a.warc.gz", [page(number, b"<html>page %d</html>" % number) for number in range(5)])
    second = write_file(tmp_path / "b.warc.gz", [page(number, b"<html>other %d</html>" % number)
                                                 for number in range(5, 8)])
    damaged = dict(second[1], offset=second[1]["offset"] + 3)  # not the start of a record
    missing = dict(first[0], file=f"file://{tmp_path / 'gone.warc.gz'}")
    rows = [second[2], first[3], damaged, first[0], missing, second[0], first[4]]
    with ArchiveReader() as reader:
        results = reader.read_many(rows)
    for row, result in zip(rows, results, strict=True):
        if row is damaged or row is missing:
            assert isinstance(result, ArchiveUnavailable)
            continue
        alone = read_archived(row)
        assert result == alone and alone is not None and alone.body.startswith(b"<html>")


@pytest.mark.parametrize("deflate", ["isal", "zlib"])
def test_records_pass_warcio_check_with_isal_and_with_its_zlib_fallback(tmp_path: Path, deflate: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """ISA-L's deflate when python-isal is installed (it is pinned); zlib's when it is absent: both write gzip
    members that warcio checks and reads, each record alone from its offset."""
    if deflate == "isal":
        assert warc_records.ISAL_DEFLATE is not None, "python-isal is pinned in requirements.txt: install it"
    else:
        monkeypatch.setattr(warc_records, "ISAL_DEFLATE", None)
    pages = [page(number, b"<html><p>page %d</p>" % number + b"<li>item</li>" * number * 40 + b"</html>")
             for number in range(1, 5)]
    path = tmp_path / f"{deflate}.warc.gz"
    rows = write_file(path, pages)
    checked = subprocess.run([str(VENV_BIN / "warcio"), "check", "-v", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert [read_archived(row).body for row in rows] == [archived.exchange.body for archived in pages]  # type: ignore[union-attr]
    assert gzip.decompress(warc_records.gzip_member(b"x" * 5000)) == b"x" * 5000


def test_the_hand_made_digests_dates_and_ids_are_the_standard_ones() -> None:
    """The cheaper forms give what base64's base32, strftime and uuid4 give."""
    for body in (b"", b"a", b"<html>" * 1000, bytes(range(256)), *(b"%d" % number for number in range(500))):
        expected = "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()
        assert payload_digest(body) == expected
    for digest in (bytes(20), b"\xff" * 20, bytes(range(20)), bytes(range(255, 235, -1))):  # every bit's place
        assert warc_records.sha1_base32(digest) == base64.b32encode(digest).decode()
    for moment in (MOMENT, MOMENT.replace(microsecond=7), datetime(2026, 12, 5, 4, 0, 59, 999_999, tzinfo=UTC),
                   datetime(2026, 12, 5, 5, 0, tzinfo=timezone(timedelta(hours=1)))):
        assert warc_records.warc_date(moment) == moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ids = {warc_records.new_record_id() for _ in range(1000)} | set(warc_records.record_ids(1000))
    assert len(ids) == 2000
    for record_id in list(ids)[:200]:
        parsed = uuid.UUID(record_id.removeprefix("<urn:uuid:").removesuffix(">"))
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and record_id == f"<urn:uuid:{parsed}>"
    assert warc_records.http_head("GET / HTTP/1.1", [("X-Note", "a\r\nInjected: b"), ("Host", "x")]) == (
        b"GET / HTTP/1.1\r\nX-Note: a  Injected: b\r\nHost: x\r\n\r\n")


@pytest.mark.parametrize("url", [
    "http://h", "http://h/", "http://h/p", "http://h/p?q=1", "http://h?q", "http://h/p?", "http://h/p#f",
    "http://h/p?a#f", "http://h:8080/a/b/c?x=/y", "https://user:pass@h/x", "http://h#f", "http://h?#f",
    "http://h/a?b?c", "http://h/a#b?c", "http://h/%20x?y=%2F", "http://h/a/?q=a/b", "http://[::1]:80/v6?x"])
def test_the_request_target_is_the_path_and_query_urlsplit_gives(url: str) -> None:
    parts = urlsplit(url)
    assert warc_records.request_line(url, "POST") == "POST " + (parts.path or "/") + (
        f"?{parts.query}" if parts.query else "")
