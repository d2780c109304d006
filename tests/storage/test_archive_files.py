"""The archive writer's local files: a run's file stays open between its batches, is never appended to once it was
deleted under the writer (a new file starts), and a writer keeps only so many open; a write that hangs never holds
the process at exit."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from harvester.config import SourceConfig
from harvester.scraping import Exchange
from harvester.storage import ArchivedPage, ArchiveIndex, ArchiveWriter, read_archived
from harvester.storage.archive import OPEN_FILES_KEPT

pytestmark = pytest.mark.integration
MOMENT = datetime(2026, 12, 6, 20, 0, tzinfo=UTC)


def source(location: Path) -> SourceConfig:
    return SourceConfig.model_validate({"name": "shop", "input": {"seeds": ["http://shop.example/"]},
                                        "attributes": {"title": {"css": "h1"}},
                                        "output": {"archive": {"enabled": True, "location": f"file://{location}"}}})


def page(run: str, body: bytes) -> ArchivedPage:
    return ArchivedPage("t", run, "http://shop.example/p", Exchange(
        "GET", "http://shop.example/p", (("User-Agent", "Harvester"),), 200, (("Content-Type", "text/html"),), body),
        MOMENT)


@pytest.fixture
def writer(mongo_server, mongo_database):
    writer = ArchiveWriter(ArchiveIndex(mongo_server.client()[mongo_database]), "file:///unused", 30.0, 0.0)
    yield writer
    writer.close()


def test_a_runs_batches_go_to_one_file_kept_open(writer, tmp_path) -> None:
    for number in range(3):
        writer.archive(source(tmp_path), [page("run", b"<p>%d</p>" % number)])
    files = sorted(tmp_path.rglob("*.warc.gz"))
    assert len(files) == 1 and [current.handle is not None for current in writer._open.values()] == [True]
    rows = writer.index.rows("shop", "run")
    assert sorted(read_archived(row).body for row in rows) == [b"<p>0</p>", b"<p>1</p>", b"<p>2</p>"]


def test_a_file_deleted_under_the_writer_is_not_appended_to(writer, tmp_path) -> None:
    writer.archive(source(tmp_path), [page("run", b"<p>first</p>"), page("run", b"<p>second</p>")])
    first = next(tmp_path.rglob("*.warc.gz"))
    first.unlink()  # a clean-up or an operator, while the writer holds it open
    writer.archive(source(tmp_path), [page("run", b"<p>third</p>")])
    files = list(tmp_path.rglob("*.warc.gz"))
    assert len(files) == 1 and files[0] != first
    newest = max(writer.index.rows("shop", "run"), key=lambda row: row["offset"] if row["file"].endswith(
        files[0].name) else -1)
    assert read_archived(newest).body == b"<p>third</p>"  # a whole file of its own, from offset 0 (warcinfo first)


def test_a_writer_keeps_only_so_many_files_open(writer, tmp_path) -> None:
    for number in range(OPEN_FILES_KEPT + 4):
        writer.archive(source(tmp_path), [page(f"run-{number}", b"<p>x</p>")])
    assert len(writer._open) == OPEN_FILES_KEPT
    assert "run-0" not in {run for _, run in writer._open} and ("shop", f"run-{OPEN_FILES_KEPT + 3}") in writer._open
    writer.archive(source(tmp_path), [page("run-0", b"<p>again</p>")])  # its file was closed: a new one
    assert len(list((tmp_path / "shop" / "run-0").glob("*.warc.gz"))) == 2
    writer.close()
    assert writer._open == {}


HANGING_WRITE = """
import sys, threading, time

import fsspec
from fsspec.implementations.memory import MemoryFileSystem
from harvester.config import SourceConfig
from harvester.errors import ArchiveUnavailable
from harvester.storage import ArchiveIndex, ArchiveWriter
from pymongo import MongoClient
from tests.storage.test_archive_files import page


class HangingFileSystem(MemoryFileSystem):  # an object store that never answers
    protocol = "hanging"
    store: dict = {}
    pseudo_dirs: list = [""]

    def _open(self, path, mode="rb", **kwargs):
        threading.Event().wait(120)


fsspec.register_implementation("hanging", HangingFileSystem, clobber=True)
writer = ArchiveWriter(ArchiveIndex(MongoClient(sys.argv[1])[sys.argv[2]]), "hanging://archive", 0.5, 0.0)
shop = SourceConfig.model_validate({"name": "shop", "input": {"seeds": ["http://shop.example/"]},
                                    "attributes": {"title": {"css": "h1"}}, "output": {"archive": {"enabled": True}}})
try:
    writer.archive(shop, [page("run", b"<p>hangs</p>")])
except ArchiveUnavailable as error:
    print("unavailable:", error, flush=True)
writer.close()
print("exiting", time.monotonic(), flush=True)
"""


def test_a_write_that_hangs_never_holds_the_worker_process_at_exit(mongo_server, mongo_database) -> None:
    """The writer's thread stuck in a store that never answers is a daemon: the process still exits (a Celery
    worker's child being replaced, a restart), where a thread pool's worker would be joined at exit for as long
    as the store hangs."""
    import os
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", HANGING_WRITE, mongo_server.uri, mongo_database], cwd=root,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "include"), str(root)])},
                          capture_output=True, text=True, timeout=110)
    assert "unavailable: " in done.stdout and "within 0.5s" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0 and "exiting" in done.stdout
    assert time.monotonic() - started < 60  # the store would hang for 120 s


def test_a_revisit_lookup_in_an_index_that_never_answers_holds_the_batch_no_longer_than_the_write_timeout(
        tmp_path) -> None:
    """The records are made in the batch's thread, but the index's revisit lookups run in the writer's: a MongoDB
    that accepts connections and never answers costs the batch ``archive_write_timeout_seconds``, then the gap,
    and the next batch is refused at once rather than queued behind the stuck lookup."""
    import socket
    import time

    from harvester.errors import ArchiveUnavailable
    from pymongo import MongoClient

    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers one
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    client = MongoClient(f"mongodb://127.0.0.1:{silent.getsockname()[1]}/?directConnection=true",
                         serverSelectionTimeoutMS=20_000, connectTimeoutMS=20_000, socketTimeoutMS=20_000)
    writer = ArchiveWriter(ArchiveIndex(client["harvester"]), "file:///unused", 0.5, 0.0)  # no filter: all looked up
    try:
        started = time.monotonic()
        with pytest.raises(ArchiveUnavailable, match=r"within 0\.5s"):
            writer.archive(source(tmp_path), [page("run", b"<p>looked up</p>")])
        assert time.monotonic() - started < 5
        started = time.monotonic()
        with pytest.raises(ArchiveUnavailable, match="not finished"):
            writer.archive(source(tmp_path), [page("run", b"<p>next</p>")])
        assert time.monotonic() - started < 0.4
        assert not list(tmp_path.rglob("*.warc.gz"))  # nothing written for a batch whose lookups never ended
    finally:
        writer.close()
        client.close()
        silent.close()
