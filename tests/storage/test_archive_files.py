"""The archive writer's local files: a run's file stays open between its batches, is never appended to once it was
deleted under the writer (a new file starts), and a writer keeps only so many open."""

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
