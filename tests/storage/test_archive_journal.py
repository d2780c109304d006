"""The archive index's rows written behind the WARC bytes: they reach the index without another batch, the revisit
lookup finds a payload among them as it would in the index, a writer killed before its flush loses no row (the next
writer puts its journal in), and an index that refuses a flush keeps the rows waiting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import bson
import pymongo
import pytest
from harvester.config import SourceConfig
from harvester.scraping import Exchange
from harvester.storage import ArchivedPage, ArchiveIndex, ArchiveWriter, read_archived
from harvester.storage.archive_index import IndexEntry
from harvester.storage.archive_journal import JOURNAL_FOLDER, RowsBehind, read_journal
from harvester.storage.warc_records import payload_digest
from warcio.archiveiterator import ArchiveIterator

from tests.fixtures.servers import MongoServer

pytestmark = pytest.mark.integration
MOMENT = datetime(2026, 12, 6, 7, 0, 0, 123456, tzinfo=UTC)  # microseconds: the index keeps milliseconds


def source(name: str, location: Path) -> SourceConfig:
    return SourceConfig.model_validate({"name": name, "input": {"seeds": ["http://shop.example/"]},
                                        "attributes": {"title": {"css": "h1"}},
                                        "output": {"archive": {"enabled": True, "location": f"file://{location}"}}})


def page(url: str, body: bytes, status: int = 200, task: str = "t") -> ArchivedPage:
    return ArchivedPage(task, "run-1", url, Exchange("GET", url, (("User-Agent", "Harvester"),), status,
                                                     (("Content-Type", "text/html"),), body), MOMENT)


def writer(mongo_server: MongoServer, database: str, flush_seconds: float) -> ArchiveWriter:
    return ArchiveWriter(ArchiveIndex(mongo_server.client()[database]), "file:///unused", 30.0, flush_seconds)


def journals(location: Path) -> list[Path]:
    return sorted((location / JOURNAL_FOLDER).glob("*.bson"))


def revisits(location: Path) -> list[tuple[str, str | None, str | None, str | None]]:
    """Each revisit record's target, profile and the original it names, in file order."""
    found = []
    for path in sorted(location.rglob("*.warc.gz")):
        with path.open("rb") as handle:
            found += [(record.rec_headers.get_header("WARC-Target-URI"), record.rec_headers.get_header("WARC-Profile"),
                       record.rec_headers.get_header("WARC-Refers-To-Target-URI"),
                       record.rec_headers.get_header("WARC-Refers-To-Date"))
                      for record in ArchiveIterator(handle) if record.rec_type == "revisit"]
    return found


def test_rows_written_behind_reach_the_index_within_the_interval_without_another_batch(
        mongo_server: MongoServer, mongo_database: str, tmp_path: Path) -> None:
    behind = writer(mongo_server, mongo_database, 0.5)
    try:
        assert behind.archive(source("shop", tmp_path), [page(f"http://shop.example/{n}", b"<p>%d</p>" % n)
                                                         for n in range(3)]) == 3
        index = ArchiveIndex(mongo_server.client()[mongo_database])
        assert index.latest("shop") == []  # waiting: in the journal beside the files, not in the index yet
        [journal] = journals(tmp_path)
        assert sorted(bson.decode(row)["url"] for row in read_journal(str(journal))) == [
            f"http://shop.example/{n}" for n in range(3)]
        deadline = time.monotonic() + 10
        while (len(index.latest("shop")) < 3 or journals(tmp_path)) and time.monotonic() < deadline:  # the
            time.sleep(0.05)  # writer's timer, no batch: the rows inserted, then the journal emptied
        rows = index.latest("shop")
        assert len(rows) == 3 and journals(tmp_path) == []
        assert all(read_archived(row) is not None for row in rows)  # each row points at its whole record
    finally:
        behind.close()


@pytest.mark.parametrize("flushed_between", [False, True], ids=["waiting", "flushed"])
def test_a_revisit_found_among_rows_waiting_is_the_one_the_index_gives(
        mongo_server: MongoServer, mongo_database: str, tmp_path: Path, flushed_between: bool) -> None:
    """The same batches through a writer that inserts each batch's rows and one that writes them behind: the same
    revisit records (profile, original, its date to the millisecond) and index rows, whether the second batch's
    lookup found its originals among the rows waiting or, flushed, in the index."""
    index = ArchiveIndex(mongo_server.client()[mongo_database])
    results = []
    for name, flush_seconds in (("inline", 0.0), ("behind", 60.0)):  # names of one length: the same offsets
        location = tmp_path / name
        archive = writer(mongo_server, mongo_database, flush_seconds)
        try:
            # an earlier process archived the old payload: the index's copy, older, is the original to name
            index.add([IndexEntry(source=name, run="run-0", task_id="t0", url="http://shop.example/old",
                                  final_url="http://shop.example/old", time=datetime(2026, 12, 1, tzinfo=UTC),
                                  file="file:///earlier.warc.gz", offset=0, length=10,
                                  digest=payload_digest(b"old"), status=200, record="response")])
            archive.archive(source(name, location), [page("http://shop.example/a", b"<p>a</p>"),
                                                     page("http://shop.example/b", b"<p>b</p>")])
            if flushed_between:
                assert archive.flush()
            archive.archive(source(name, location), [
                page("http://shop.example/a-again", b"<p>a</p>"),  # a payload this writer archived a batch ago
                page("http://shop.example/b", b"", status=304),  # a 304 of a page archived a batch ago
                page("http://shop.example/c", b"old"),  # a payload another process archived
                page("http://shop.example/d", b"<p>d</p>")])  # new
            assert archive.flush()
        finally:
            archive.close()
        rows = sorted(index.rows(name), key=lambda row: (row["url"], row["record"]))
        responses = {(row["file"], row["offset"]): row["url"] for row in rows if row["record"] == "response"}
        results.append(([(row["url"], row["record"], row["run"], row.get("payload") and responses[
            row["payload"]["file"], row["payload"]["offset"]]) for row in rows], revisits(location)))
    inline, behind = results
    assert inline == behind
    assert [(url, payload) for url, record, _, payload in behind[0] if record == "revisit"] == [
        ("http://shop.example/a-again", "http://shop.example/a"), ("http://shop.example/b", "http://shop.example/b"),
        ("http://shop.example/c", "http://shop.example/old")]
    assert [(target, original, date) for target, _, original, date in behind[1]] == [
        ("http://shop.example/a-again", "http://shop.example/a", "2026-12-06T07:00:00.123000Z"),
        ("http://shop.example/b", "http://shop.example/b", "2026-12-06T07:00:00.123000Z"),
        ("http://shop.example/c", "http://shop.example/old", "2026-12-01T00:00:00.000000Z")]


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    sys.path[:0] = {paths!r}
    from pathlib import Path
    from tests.storage.test_archive_journal import page, source, writer

    class Server:
        uri = {uri!r}
        def client(self):
            import pymongo
            return pymongo.MongoClient(self.uri)

    archive = writer(Server(), {database!r}, 60.0)
    archive.archive(source("shop", Path({location!r})), [page("http://shop.example/%d" % n, b"<p>%d</p>" % n,
                                                              task="killed-%d" % n) for n in range(4)])
    print("archived", flush=True)
    time.sleep(60)
""")


def test_a_writer_killed_before_its_flush_loses_no_row_the_next_writer_puts_its_journal_in(
        mongo_server: MongoServer, mongo_database: str, tmp_path: Path) -> None:
    script = KILLED_WRITER.format(paths=[str(Path.cwd()), *sys.path], uri=mongo_server.uri, database=mongo_database,
                                  location=str(tmp_path))
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "archived"
    finally:
        os.kill(process.pid, signal.SIGKILL)  # no close, no flush: what a killed worker leaves
        process.wait(timeout=10)
    index = ArchiveIndex(mongo_server.client()[mongo_database])
    assert index.latest("shop") == [] and len(journals(tmp_path)) == 1
    following = writer(mongo_server, mongo_database, 0.0)
    try:
        following.archive(source("shop", tmp_path), [page("http://shop.example/next", b"<p>next</p>")])
    finally:
        following.close()
    rows = index.latest("shop")
    assert sorted(row["task_id"] for row in rows) == ["killed-0", "killed-1", "killed-2", "killed-3", "t"]
    assert all(b"<p>" in read_archived(row).body for row in rows)  # the dead process's records, whole
    assert journals(tmp_path) == []


def test_an_index_that_refuses_a_flush_keeps_the_rows_waiting_journalled_until_it_answers(
        mongo_server: MongoServer, mongo_database: str, tmp_path: Path) -> None:
    unreachable = pymongo.MongoClient("mongodb://127.0.0.1:9/", serverSelectionTimeoutMS=300, connect=False)
    rows = RowsBehind(ArchiveIndex(unreachable["harvester"]), 60.0)
    documents = [IndexEntry(source="shop", run="r", task_id=f"t{n}", url=f"http://shop.example/{n}",
                            final_url=f"http://shop.example/{n}", time=MOMENT, file="file:///a.warc.gz", offset=n,
                            length=1, digest=f"sha1:{n}", status=200, record="response").encoded() for n in range(2)]
    rows.write(str(tmp_path), documents, [])
    assert rows.flush() is False  # refused: nothing lost, nothing raised into the batch
    assert len(rows.pending.documents) == 2 and len(read_journal(str(journals(tmp_path)[0]))) == 2
    rows.index = ArchiveIndex(mongo_server.client()[mongo_database])  # the index answers again
    assert rows.flush() is True
    assert len(rows.index.latest("shop")) == 2 and journals(tmp_path) == []
    rows.index.insert_documents(documents)  # a row sent again (a lost reply, a journal put back) is one row
    assert rows.index.collection.count_documents({"source": "shop"}) == 2
    unreachable.close()


def test_a_journal_cut_short_by_a_kill_mid_write_yields_its_whole_rows(tmp_path: Path) -> None:
    rows = [bson.encode({"_id": n, "url": f"http://shop.example/{n}"}) for n in range(3)]
    journal = tmp_path / "host-1-abc.bson"
    journal.write_bytes(rows[0] + rows[1] + rows[2][:7])
    assert read_journal(str(journal)) == rows[:2]


def test_only_journals_nobody_will_flush_are_put_back(tmp_path: Path) -> None:
    """Another writer's journal of this process, or of a live process here, is its own to flush; one of a process
    gone, one claimed here earlier, and one left unchanged for long are put back."""
    from harvester.storage.archive_journal import ABANDONED_AFTER_SECONDS, IndexJournal, abandoned_journals

    folder = str(tmp_path)
    ours, sibling = IndexJournal(folder), IndexJournal(folder)  # two writers of this process
    for journal in (ours, sibling):
        journal.append([bson.encode({"_id": 1})])
    host = sibling.path.rsplit("/", 1)[-1].rsplit("-", 2)[0]
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{host}-{int(gone.stdout)}-wdead.bson"
    alive = tmp_path / f"{host}-{os.getppid()}-wlive.bson"
    claimed = tmp_path / f"{host}-{os.getpid()}-cearlier.bson"
    old = tmp_path / f"elsewhere-{os.getppid()}-wold.bson"
    for path in (dead, alive, claimed, old):
        path.write_bytes(bson.encode({"_id": 2}))
    stale = time.time() - ABANDONED_AFTER_SECONDS - 1
    os.utime(old, (stale, stale))
    assert sorted(abandoned_journals(folder, ours.path)) == sorted(str(path) for path in (dead, claimed, old))


def test_a_journal_that_cannot_be_written_fails_the_batch_s_archive_like_its_bytes(
        mongo_server: MongoServer, mongo_database: str, tmp_path: Path) -> None:
    """The rows' journal is part of archiving a batch: when it cannot be written the batch is not archived (its gap
    counted, or the batch retried when ``required``), and nothing waits to be indexed without a journal."""
    from harvester.errors import ArchiveUnavailable

    (tmp_path / JOURNAL_FOLDER).write_text("a file where the journal's folder should be")
    behind = writer(mongo_server, mongo_database, 60.0)
    try:
        with pytest.raises(ArchiveUnavailable, match="failed"):
            behind.archive(source("shop", tmp_path), [page("http://shop.example/1", b"<p>1</p>")])
        assert behind.rows.pending.documents == [] and behind.flush()
    finally:
        behind.close()
    assert ArchiveIndex(mongo_server.client()[mongo_database]).latest("shop") == []


def test_a_journal_claimed_or_emptied_between_batches_is_never_appended_to_again(tmp_path: Path) -> None:
    """A recovering process claims an abandoned journal by renaming it and reads it once; the flush empties one by
    deleting it. Whatever the writer keeps open between batches, the rows of its next batch go to a new file under
    its own name, never into the claimed file (whose rows would then be read by nobody) nor into a deleted one."""
    from harvester.storage.archive_journal import IndexJournal

    journal = IndexJournal(str(tmp_path))
    first, second, third = ([bson.encode({"_id": f"{batch}-{n}"}) for n in range(2)] for batch in "abc")
    journal.append(first)
    claimed = tmp_path / "elsewhere-1-cclaimed.bson"
    os.rename(journal.path, claimed)  # what recover_journals does to a journal it puts back
    journal.append(second)
    assert read_journal(str(claimed)) == first
    assert read_journal(journal.path) == second
    journal.clear()  # a flush: its rows are in the index
    journal.append(third)
    assert read_journal(journal.path) == third
    journal.close()
