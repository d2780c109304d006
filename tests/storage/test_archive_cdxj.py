"""The archive index's CDXJ export says what pywb's own indexer (cdxj-indexer, pinned for the tests) reads from the
same WARC files: the same SURT key, timestamp, media type, offset, length, payload digest, status and file name
(under the archive's location, what pywb's ``archive_paths`` points at) for every response and revisit record, so
pywb finds each page by its URL and loads it. The URLs are the kind whose SURT a naive one gets wrong: query
parameters out of order, a trailing slash, escapes, a session id, ``www2.``, a host that is not ASCII."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from harvester.config import SourceConfig
from harvester.scraping import Exchange
from harvester.storage import ArchivedPage, ArchiveIndex, ArchiveWriter, cdxj_line
from harvester.storage.archive_index import media_type
from harvester.urls import surt_key

from tests.corpora import corpus_file
from tests.fixtures.servers import VENV_BIN

pytestmark = pytest.mark.integration
MOMENT = datetime(2026, 12, 7, 9, 30, 15, 250_000, tzinfo=UTC)
URLS = (
    "http://www.shop.example/Shop?b=2&a=1",
    "http://shop.example/shop/",
    "http://shop.example:8080/a%2fb?x=Y",
    "http://www2.shop.example/x",
    "http://shop.example/p?PHPSESSID=0123456789abcdef0123456789abcdef&id=2",
    "http://bücher.example/p",
    "http://shop.example/%7Euser",
    "https://shop.example:443/p?utm_source=mail&id=3",
)
FIELDS = ("url", "mime", "status", "digest", "length", "offset", "filename")
Lines = dict[tuple[str, int], tuple[str, str, dict[str, Any]]]  # (file name, offset) -> (key, timestamp, fields)


def archived(url: str, number: int, run: str, status: int = 200, moment: datetime = MOMENT) -> ArchivedPage:
    body = b"" if status == 304 else b"<html><h1>item %d</h1></html>" % number
    return ArchivedPage(f"task-{number}", run, url, Exchange(
        "GET", url, (("User-Agent", "Harvester"),), status, (("Content-Type", "text/html; charset=utf-8"),), body),
        moment)


def lines_by_record(lines: list[str]) -> Lines:
    """CDXJ lines by (file name, offset): (SURT key, timestamp, fields)."""
    parsed = {}
    for line in lines:
        key, timestamp, fields = line.split(" ", 2)
        entry = json.loads(fields)
        parsed[(entry["filename"], int(entry["offset"]))] = (key, timestamp, entry)
    return parsed


def archived_and_indexed(mongo_server, mongo_database: str, location: Path, name: str,
                         waves: list[list[ArchivedPage]]) -> tuple[Lines, Lines]:
    """``waves`` archived by ``ArchiveWriter`` under ``location``, one call each, as a worker's batches: the export's
    lines (files named under the location) and cdxj-indexer's of the same files (``--dir-root`` the location)."""
    source = SourceConfig.model_validate({
        "name": name, "input": {"seeds": ["http://shop.example/"]}, "attributes": {"title": {"css": "h1"}},
        "output": {"archive": {"enabled": True, "location": f"file://{location}"}}})
    index = ArchiveIndex(mongo_server.client()[mongo_database])
    writer = ArchiveWriter(index, "file:///unused", 30.0, 0.0)
    try:
        for wave in waves:
            writer.archive(source, wave)
    finally:
        writer.close()
    ours = lines_by_record(sorted(cdxj_line(row, f"file://{location}") for row in index.rows(name)))
    files = sorted(str(path) for path in location.rglob("*.warc.gz"))
    indexed = subprocess.run([str(VENV_BIN / "cdxj-indexer"), "--dir-root", str(location), *files],
                             capture_output=True, text=True, timeout=300)
    assert indexed.returncode == 0, indexed.stderr
    return ours, lines_by_record([line for line in indexed.stdout.splitlines() if line.strip()])


def test_the_cdxj_export_reads_as_pywbs_indexer_reads_the_warc_files(mongo_server, mongo_database, tmp_path) -> None:
    later = MOMENT + timedelta(days=1)  # the same payloads again (revisits), and a 304
    ours, reference = archived_and_indexed(mongo_server, mongo_database, tmp_path / "archive", "shop", [
        [archived(url, number, "one") for number, url in enumerate(URLS)],
        [archived(url, number, "two", 304 if number == 0 else 200, later) for number, url in enumerate(URLS)]])
    assert len(ours) == 2 * len(URLS) and set(ours) == set(reference)
    differences, kinds = [], []
    for record, (key, timestamp, entry) in sorted(ours.items()):
        their_key, their_timestamp, theirs = reference[record]
        mine = (key, timestamp, *(entry.get(field) for field in FIELDS))
        expected = (their_key, their_timestamp, *(theirs.get(field) for field in FIELDS))
        if mine != expected:
            differences.append(f"{entry['url']}: ours {mine}, pywb's indexer {expected}")
        kinds.append(theirs.get("mime"))
    assert not differences, "\n".join(differences)
    assert kinds.count("warc/revisit") == len(URLS)  # the second run: every page a revisit (one of them a 304)
    originals = {entry["refers_to"] for _, _, entry in ours.values() if "refers_to" in entry}
    assert len(originals) == 1 and originals < {name for name, _ in ours}  # the first run's file, by the same name


def test_real_product_pages_export_as_pywbs_indexer_reads_them(mongo_server, mongo_database, tmp_path) -> None:
    """The 140 pages of Zyte's product benchmark (62 hosts, ``../shared/corpora``) archived under their own URLs as
    the fetcher would ask for them (canonical: tracking parameters and fragments dropped), 0.6 MB of HTML a page:
    every line of the export is the line cdxj-indexer reads from the files."""
    import gzip

    from harvester.urls import canonicalise_url

    truth = json.loads(corpus_file("zyte-products/ground-truth.json").read_text())
    folder = corpus_file("zyte-products/README.md").parent / "html"
    pages = [ArchivedPage(f"task-{number}", "one", url, Exchange(
        "GET", url, (("User-Agent", "Harvester"),), 200, (("Content-Type", "text/html; charset=utf-8"),),
        gzip.decompress((folder / f"{name}.html.gz").read_bytes())), MOMENT)
        for number, (name, facts) in enumerate(sorted(truth.items()))
        if (url := canonicalise_url(facts["url"])) is not None]
    ours, reference = archived_and_indexed(mongo_server, mongo_database, tmp_path / "archive", "real",
                                           [pages[start:start + 16] for start in range(0, len(pages), 16)])
    assert len(pages) == len(truth) == len(ours) and ours == reference


def test_a_url_the_surt_package_cannot_read_is_its_own_key_and_a_row_without_a_media_type_has_no_mime() -> None:
    assert surt_key("http://shop.example:99999/p") == "http://shop.example:99999/p"
    row = {"url": "http://shop.example/p", "time": MOMENT, "record": "response", "status": 200, "digest": "sha1:X",
           "length": 10, "offset": 0, "file": "file:///old/shop/r/a.warc.gz"}  # archived before rows kept the type
    key, timestamp, fields = cdxj_line(row, "file:///archive/").split(" ", 2)
    assert (key, timestamp) == ("example,shop)/p", "20261207093015") and "mime" not in json.loads(fields)
    assert json.loads(fields)["filename"] == "file:///old/shop/r/a.warc.gz"  # not under the location: its URL
    assert json.loads(cdxj_line(row, "file:///old").split(" ", 2)[2])["filename"] == "shop/r/a.warc.gz"
    assert media_type([("content-TYPE", " application/json;charset=utf-8")]) == "application/json"
    assert media_type([("Content-Length", "3")]) is None
