"""The WARC archive of fetched pages: written by the batch, readable by warcio, free of credentials, deduplicated,
expired, and never the reason a record is lost or a harvest stalls."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harvester.config.model import SourceConfig
from harvester.distributor import TaskMessage
from harvester.errors import ArchiveUnavailable
from harvester.metrics.collector import metrics_registry
from harvester.redis_keys import SourceKeys
from harvester.storage import ArchivedDigests, ArchiveIndex, RunFigures, expire_archive, read_archived
from harvester_demo.hostile import BASIC_AUTH_PASSWORD, BASIC_AUTH_USER
from warcio.archiveiterator import ArchiveIterator

from tests.fixtures.servers import VENV_BIN
from tests.metrics.helpers import scrape, value
from tests.workers.test_batch import records
from tests.workers.test_batch import run_until_idle as run_batches_until_idle

pytestmark = pytest.mark.integration


def archive_source(write_source, location: Path, name: str = "archived", **archive: object) -> SourceConfig:
    return write_source(name, output={"key": ["url"], "archive": {"enabled": True,
                                                                   "location": f"file://{location}", **archive}})


def warc_files(location: Path) -> list[Path]:
    return sorted(location.rglob("*.warc.gz"))


def warc_records(location: Path) -> list:
    found = []
    for path in warc_files(location):
        with path.open("rb") as handle:
            for record in ArchiveIterator(handle):
                found.append((record.rec_type, record.rec_headers.get_header("WARC-Target-URI"),
                              record.http_headers.get_statuscode() if record.http_headers else None,
                              record.content_stream().read()))
    return found


def run_until_idle(crawl, source) -> list[dict]:
    """The batches until the source is idle, then the index rows they left waiting flushed (what the writer's
    timer does within ``archive_index_flush_seconds``), so the test reads the index at once."""
    reports = run_batches_until_idle(crawl, source)
    assert crawl.runner.archive.flush()
    return reports


def archive_runs(crawl, source, url: str, *runs: str) -> None:
    """One page fetched (and archived) in each of ``runs``, one after the other."""
    for run in runs:
        crawl.push(source, TaskMessage(source=source.name, kind="details", url=url, run_id=run))
        run_until_idle(crawl, source)


def index_of(mongo_server, settings) -> ArchiveIndex:
    return ArchiveIndex(mongo_server.client()[settings.mongo_database])


@contextlib.contextmanager
def replaying(source: str, run: str) -> Iterator[tuple[str, str]]:
    """``harvester replay SOURCE --run RUN`` serving while the block runs: (its base URL, the line it printed)."""
    replay = subprocess.Popen([str(VENV_BIN / "harvester"), "replay", source, "--run", run],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = replay.stdout.readline()
        assert "replaying" in line, line + (replay.stdout.read() if replay.poll() is not None else "")
        yield line.strip().rsplit(" ", 1)[1], line
    finally:
        replay.terminate()
        replay.wait(timeout=10)


def test_every_fetched_page_is_archived_as_request_and_response_and_indexed(
        write_source, crawl, demo_site, mongo_server, worker_settings, tmp_path) -> None:
    location = tmp_path / "archive"
    source = archive_source(write_source, location)
    urls = [f"{demo_site.url}/product/{number}" for number in (1, 2, 3)]
    crawl.push(source, *[TaskMessage(source=source.name, kind="details", url=url, run_id="run-1") for url in urls])
    run_until_idle(crawl, source)
    assert records(mongo_server, worker_settings, source).count_documents({}) == 3
    found = warc_records(location)
    assert [kind for kind, *_ in found].count("warcinfo") == 1
    responses = {uri: body for kind, uri, status, body in found if kind == "response" and status == "200"}
    assert set(responses) == set(urls) and b"SKU-00002" in responses[urls[1]]
    assert [kind for kind, *_ in found].count("request") == 3
    # the files are valid WARC as warcio's own checker sees it (digests included)
    for path in warc_files(location):
        checked = subprocess.run([str(VENV_BIN / "warcio"), "check", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert all(path.parent.name == "run-1" and path.parent.parent.name == source.name
               for path in warc_files(location))
    rows = index_of(mongo_server, worker_settings).latest(source.name, run="run-1")
    assert sorted(row["url"] for row in rows) == urls
    row = next(row for row in rows if row["url"] == urls[1])
    assert row["status"] == 200 and row["record"] == "response" and row["digest"].startswith("sha1:")
    archived = read_archived(row)  # the one record the index points at, read alone
    assert archived is not None and b"SKU-00002" in archived.body and archived.content_type.startswith("text/html")
    assert crawl.store.counters(source.name)["outcome:archived"] == 3


def test_the_same_payload_again_is_a_revisit_that_still_reads(write_source, crawl, demo_site, mongo_server,
                                                              worker_settings, tmp_path) -> None:
    location = tmp_path / "archive"
    source = archive_source(write_source, location)
    url = f"{demo_site.url}/product/5"
    archive_runs(crawl, source, url, "run-1", "run-2")
    kinds = [kind for kind, *_ in warc_records(location)]
    assert kinds.count("response") == 1 and kinds.count("revisit") == 1
    for path in warc_files(location):  # revisits pass warcio's checker too
        checked = subprocess.run([str(VENV_BIN / "warcio"), "check", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    row = index_of(mongo_server, worker_settings).latest(source.name, run="run-2")[0]
    assert row["record"] == "revisit"
    archived = read_archived(row)
    assert archived is not None and b"SKU-00005" in archived.body and archived.run == "run-2"


def test_credentials_and_cookies_never_reach_the_archive(write_source, crawl, demo_site, tmp_path,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ARCHIVE_LOGIN", json.dumps({
        "conn_type": "http", "login": BASIC_AUTH_USER, "password": BASIC_AUTH_PASSWORD,
        "extra": {"headers": {"X-Site-Token": "token-secret-987"}, "cookies": {"session": "cookie-secret-654"}}}))
    location = tmp_path / "archive"
    source = write_source("locked", http_connection_id="archive_login", output={
        "key": ["url"], "archive": {"enabled": True, "location": f"file://{location}"}})
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/auth/basic/3"),
               TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/cookie/set?value=visitor-321"))
    run_until_idle(crawl, source)
    raw = b"".join(gzip.decompress(path.read_bytes()) for path in warc_files(location))
    assert b"SKU-00003" in raw  # the authenticated page was fetched and archived
    basic = base64.b64encode(f"{BASIC_AUTH_USER}:{BASIC_AUTH_PASSWORD}".encode())
    for secret in (basic, BASIC_AUTH_PASSWORD.encode(), b"token-secret-987", b"cookie-secret-654",
                   b"visitor=visitor-321"):
        assert secret not in raw
    assert b"Authorization: [redacted]" in raw and b"X-Site-Token: [redacted]" in raw
    assert b"Cookie: [redacted]" in raw and b"set-cookie: [redacted]" in raw.lower()


def test_storage_that_fails_loses_no_record_and_counts_the_gap(write_source, crawl, demo_site, mongo_server,
                                                               worker_settings, redis_client, tmp_path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the archive's folder should be")
    source = archive_source(write_source, blocked / "archive")
    registry = metrics_registry(redis_client, worker_settings)
    crawl.push(source, *[TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/{number}",
                                     run_id="run-gap") for number in (1, 2)])
    run_until_idle(crawl, source)
    assert records(mongo_server, worker_settings, source).count_documents({}) == 2
    counters = crawl.store.counters(source.name)
    assert counters["outcome:archive_gap"] == 2 and "outcome:archived" not in counters
    figures, _ = RunFigures(redis_client).read(source.name, "run-gap")  # what the run's report shows
    assert figures["archive_gap"] == 2
    assert value(scrape(registry), "harvester_archive_gap_pages_total", source=source.name) == 2  # the alert's


def test_a_required_archive_that_fails_retries_the_batch(write_source, crawl, demo_site, mongo_server,
                                                         worker_settings, tmp_path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the archive's folder should be")
    source = archive_source(write_source, blocked / "archive", required=True)
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/1"))
    report = crawl.step(source)
    assert report["retried"] == 1 and report["stored"] == 0
    assert records(mongo_server, worker_settings, source).count_documents({}) == 0
    blocked.unlink()  # the storage comes back: the retry archives and stores the page
    run_until_idle(crawl, source)
    assert records(mongo_server, worker_settings, source).count_documents({}) == 1
    assert crawl.store.counters(source.name)["outcome:archived"] == 1


def test_a_full_disk_is_a_gap_and_the_next_batch_starts_a_new_file(write_source, crawl, demo_site, mongo_server,
                                                                   worker_settings, tmp_path) -> None:
    location = tmp_path / "archive"
    source = archive_source(write_source, location)
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/1", run_id="r"))
    run_until_idle(crawl, source)
    [first] = warc_files(location)
    kept = first.read_bytes()
    [current] = crawl.runner.archive.writer._open.values()  # the run's file, kept open for its next batch
    current.handle.close()
    current.handle = open("/dev/full", "ab", buffering=0)  # noqa: SIM115  the disk fills: its writes answer ENOSPC
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/2", run_id="r"))
    run_until_idle(crawl, source)
    assert records(mongo_server, worker_settings, source).count_documents({}) == 2
    assert crawl.store.counters(source.name)["outcome:archive_gap"] == 1
    assert first.read_bytes() == kept
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/3", run_id="r"))
    run_until_idle(crawl, source)
    assert len(warc_files(location)) == 2  # a new file; the full one is left as it was
    assert crawl.store.counters(source.name)["outcome:archived"] == 2


def test_files_rotate_past_their_size(write_source, crawl, demo_site, tmp_path) -> None:
    location = tmp_path / "archive"
    source = archive_source(write_source, location, max_file_mb=1)
    url = f"{demo_site.url}/product/1"
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=url, run_id="r"))
    run_until_idle(crawl, source)
    assert len(warc_files(location)) == 1
    crawl.runner.archive.writer._open[(source.name, "r")].size = 1024 * 1024 + 1  # as if batches had filled it
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/2", run_id="r"))
    run_until_idle(crawl, source)
    assert len(warc_files(location)) == 2


def test_retention_deletes_old_files_and_their_rows(write_source, crawl, demo_site, mongo_server, worker_settings,
                                                    tmp_path) -> None:
    location = tmp_path / "archive"
    source = archive_source(write_source, location, keep="2d")
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/1", run_id="r"))
    run_until_idle(crawl, source)
    index = index_of(mongo_server, worker_settings)
    digests = ArchivedDigests.from_settings(worker_settings, index)
    payload_filter = SourceKeys(source.name).archived_digests
    assert digests.client.exists(payload_filter)  # the batch's payload marked
    now = datetime.now(UTC)
    kept = expire_archive(source, index, worker_settings.archive_location, now + timedelta(days=1), digests)
    assert (kept.files, kept.rows) == (0, 0) and len(warc_files(location)) == 1
    assert digests.client.exists(payload_filter)  # nothing went: the filter stays
    expired = expire_archive(source, index, worker_settings.archive_location, now + timedelta(days=3), digests)
    assert (expired.files, expired.rows) == (1, 1)
    assert warc_files(location) == [] and index.latest(source.name) == []
    assert not digests.client.exists(payload_filter)  # rebuilt from the rows left by the next archived batch


def test_files_gone_from_storage_without_the_clean_up_lose_their_rows_and_their_payloads_are_kept_again(
        write_source, crawl, demo_site, mongo_server, worker_settings, tmp_path) -> None:
    """A file deleted by hand (or by a bucket's own expiry) left rows that read as nothing, and the same page archived
    again became a revisit of that file: unreadable too. The clean-up deletes the rows of files it no longer finds
    (started over an hour before it), and the next copy of their payload is a response again."""
    location = tmp_path / "archive"
    source = archive_source(write_source, location)
    url = f"{demo_site.url}/product/1"
    archive_runs(crawl, source, url, "a", "b")
    index = index_of(mongo_server, worker_settings)
    assert [row["record"] for row in index.rows(source.name)] == ["response", "revisit"]
    [lost] = [path for path in warc_files(location) if path.parent.name == "a"]
    lost.unlink()  # b's revisit reads its payload from a's file
    with pytest.raises(ArchiveUnavailable):  # what a re-extraction or a replay finds of b's page
        read_archived(index.latest(source.name)[0])
    digests = ArchivedDigests.from_settings(worker_settings, index)
    now = datetime.now(UTC)
    young = expire_archive(source, index, worker_settings.archive_location, now, digests)
    assert (young.files, young.rows, young.missing) == (0, 0, 0)  # a file started within the hour may be a new one
    cleaned = expire_archive(source, index, worker_settings.archive_location, now + timedelta(hours=2), digests)
    assert (cleaned.files, cleaned.rows, cleaned.missing) == (0, 2, 2) and list(index.rows(source.name)) == []
    assert not digests.client.exists(SourceKeys(source.name).archived_digests)
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=url, run_id="c"))
    run_until_idle(crawl, source)
    [row] = index.latest(source.name, run="c")
    assert row["record"] == "response" and b"SKU-00001" in read_archived(row).body


def test_a_listing_that_finds_no_file_at_all_costs_no_row(write_source, crawl, demo_site, mongo_server,
                                                          worker_settings, tmp_path) -> None:
    """An unmounted disk or a bucket that answers empty looks like every file deleted: not believed."""
    import shutil

    location = tmp_path / "archive"
    source = archive_source(write_source, location)
    archive_runs(crawl, source, f"{demo_site.url}/product/2", "a")
    shutil.rmtree(location / source.name)
    index = index_of(mongo_server, worker_settings)
    expired = expire_archive(source, index, worker_settings.archive_location, datetime.now(UTC) + timedelta(hours=2))
    assert (expired.files, expired.rows, expired.missing) == (0, 0, 0) and len(list(index.rows(source.name))) == 1


def test_the_index_exports_as_cdxj_and_the_expire_command_keeps_what_is_young(
        write_source, crawl, demo_site, worker_settings, tmp_path) -> None:
    location = tmp_path / "archive"
    source = archive_source(write_source, location)
    crawl.push(source, *[TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/{number}",
                                     run_id="r") for number in (1, 2)])
    run_until_idle(crawl, source)
    done = subprocess.run([str(VENV_BIN / "harvester"), "archive", "cdxj", source.name, "--run", "r"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and lines == sorted(lines)
    key, stamp, fields = lines[0].split(" ", 2)
    port = demo_site.url.rsplit(":", 1)[1]
    assert key == f"1,0,0,127:{port})/product/1" and len(stamp) == 14
    entry = json.loads(fields)
    assert entry["status"] == "200" and int(entry["length"]) > 0
    [warc] = warc_files(location)  # named by its path under the archive's location (pywb's archive_paths)
    assert entry["filename"] == str(warc.relative_to(location)) and entry["mime"] == "text/html"
    urls = subprocess.run([str(VENV_BIN / "harvester"), "archive", "cdxj", source.name, "--run", "r", "--file-urls"],
                          capture_output=True, text=True, timeout=120)
    assert json.loads(urls.stdout.splitlines()[0].split(" ", 2)[2])["filename"] == f"file://{warc}"
    expire = subprocess.run([str(VENV_BIN / "harvester"), "archive", "expire", source.name],
                            capture_output=True, text=True, timeout=120)
    assert expire.returncode == 0 and "0 files and 0 index rows" in expire.stdout
    assert len(warc_files(location)) == 1


def test_harvester_try_reads_an_archived_page_from_a_warc_file_without_a_request(
        write_source, crawl, demo_site, worker_settings, tmp_path) -> None:
    location = tmp_path / "archive"
    source = archive_source(write_source, location)
    url = f"{demo_site.url}/product/7"
    crawl.push(source, TaskMessage(source=source.name, kind="details", url=url, run_id="r"))
    run_until_idle(crawl, source)
    [warc] = warc_files(location)
    requests_before = demo_site.client_stats(source.name)["total"]
    done = subprocess.run([str(VENV_BIN / "harvester"), "try", source.name, url, "--warc", str(warc), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["render"] == "warc" and report["record"]["sku"] == "SKU-00007" and report["status"] == 200
    assert demo_site.client_stats(source.name)["total"] == requests_before
    missing = subprocess.run([str(VENV_BIN / "harvester"), "try", source.name, f"{demo_site.url}/product/8",
                              "--warc", str(warc)], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "no response of" in missing.stderr


def test_a_replayed_run_answers_harvester_try_with_the_archived_page(
        write_source, crawl, demo_site, worker_settings, tmp_path) -> None:
    location = tmp_path / "archive"
    source = archive_source(write_source, location)
    crawl.push(source, *[TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/{number}",
                                     run_id="recorded") for number in (4, 9)])
    run_until_idle(crawl, source)
    with replaying(source.name, "recorded") as (base, line):
        assert "replaying 2 paths" in line, line
        requests_before = demo_site.client_stats(source.name)["total"]
        done = subprocess.run([str(VENV_BIN / "harvester"), "try", source.name, f"{base}/product/9", "--json"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert report["record"]["sku"] == "SKU-00009" and report["status"] == 200
        assert demo_site.client_stats(source.name)["total"] == requests_before  # the recorded site answered
        unknown = subprocess.run([str(VENV_BIN / "harvester"), "try", source.name, f"{base}/product/5", "--json"],
                                 capture_output=True, text=True, timeout=120)
        assert json.loads(unknown.stdout)["status"] == 404


def test_a_304_is_archived_as_a_revisit_that_reads_as_the_original_page(
        write_source, crawl, demo_site, mongo_server, worker_settings, tmp_path) -> None:
    location = tmp_path / "archive"
    source = write_source("conditional", robots="ignore", listing=None,
                          input={"kind": "details", "seeds": [f"{demo_site.url}/inc/product/1"]},
                          output={"key": ["url"], "archive": {"enabled": True, "location": f"file://{location}"}})
    url = f"{demo_site.url}/inc/product/1"
    for run in ("first", "second"):
        crawl.push(source, TaskMessage(source=source.name, kind="details", url=url, run_id=run))
        run_until_idle(crawl, source)
    assert crawl.store.counters(source.name)["outcome:not_modified"] == 1
    found = warc_records(location)
    revisits = [(uri, status) for kind, uri, status, _ in found if kind == "revisit"]
    assert revisits == [(url, "304")]
    profiles = []
    for path in warc_files(location):
        with path.open("rb") as handle:
            profiles += [[value for name, value in record.rec_headers.headers if name == "WARC-Profile"]
                         for record in ArchiveIterator(handle) if record.rec_type == "revisit"]
    assert profiles == [["http://netpreserve.org/warc/1.1/revisit/server-not-modified"]]  # one profile header
    row = index_of(mongo_server, worker_settings).latest(source.name, run="second")[0]
    assert (row["record"], row["status"]) == ("revisit", 304)
    archived = read_archived(row)  # the page as the site confirmed it: the original's body
    assert archived is not None and archived.status == 200 and b"SKU-00001" in archived.body


def test_a_page_that_failed_by_its_status_is_archived_with_its_body(
        write_source, crawl, demo_site, mongo_server, worker_settings, tmp_path) -> None:
    """The archive keeps what the site last said of a URL: a 410 with its body, not only the pages that gave data
    (without it, the latest archived response of a delisted item was its last good page)."""
    location = tmp_path / "archive"
    gone, there = f"{demo_site.url}/life/shop/item/1", f"{demo_site.url}/life/shop/item/2"
    source = write_source("statuses", robots="ignore", listing=None, input={"kind": "details", "seeds": [gone]},
                          output={"key": ["url"], "archive": {"enabled": True, "location": f"file://{location}"}})
    urllib.request.urlopen(urllib.request.Request(f"{demo_site.url}/_life/delist?product=1&how=410", method="POST",
                                                  data=b""), timeout=5).close()
    try:
        crawl.push(source, *[TaskMessage(source=source.name, kind="details", url=url, run_id="run") for url in
                             (gone, there)])
        run_until_idle(crawl, source)
    finally:
        urllib.request.urlopen(urllib.request.Request(f"{demo_site.url}/_life/reset", method="POST", data=b""),
                               timeout=5).close()
    responses = {uri: (status, body) for kind, uri, status, body in warc_records(location) if kind == "response"}
    assert responses[gone][0] == "410" and b"This page does not exist" in responses[gone][1]
    assert responses[there][0] == "200"
    rows = {row["url"]: row for row in index_of(mongo_server, worker_settings).latest(source.name, run="run")}
    assert rows[gone]["status"] == 410 and read_archived(rows[gone]).status == 410


def test_inside_airflow_the_location_opens_through_object_storage_path(tmp_path) -> None:
    from harvester.airflow.connections import AirflowConnectionResolver

    resolver = AirflowConnectionResolver()
    filesystem, path = resolver.filesystem(f"file://{tmp_path}/warc", "fs_default")
    assert type(filesystem).__name__ == "LocalFileSystem" and path == f"{tmp_path}/warc"
    assert resolver.filesystem(f"file://{tmp_path}", None) is None  # no connection: fsspec's own, as on workers
    assert resolver.filesystem("nosuchscheme://bucket/x", "fs_default") is None  # no provider: not Airflow's
