"""Re-extraction over the archive: the markup drifts, the config is fixed, and the records stored meanwhile are
repaired from the archived pages, with their history written and no request reaching the site."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from harvester.distributor import TaskMessage
from harvester.producer.reextraction import Reextraction

from tests.fixtures.servers import VENV_BIN
from tests.workers.test_archive import run_until_idle
from tests.workers.test_batch import records

pytestmark = pytest.mark.integration

PRODUCTS = range(1, 7)


def restyle(demo_site, query: str) -> None:
    request = urllib.request.Request(f"{demo_site.url}/_markup{query}", method="POST", data=b"")
    urllib.request.urlopen(request, timeout=5).close()


def harvest(crawl, source, demo_site, run_id: str, details: bool = False) -> None:
    """The listing page (its new links followed); with ``details``, every product page again too (a re-harvest of
    known pages, which the listing alone would not queue within the harvesting lag)."""
    messages = [TaskMessage(source=source.name, kind="listing", url=f"{demo_site.url}/shop?per_page=6",
                            run_id=run_id)]
    if details:
        messages += [TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/{number}",
                                 run_id=run_id) for number in PRODUCTS]
    crawl.push(source, *messages)
    run_until_idle(crawl, source)


@pytest.fixture
def drifted(write_source, crawl, demo_site, tmp_path: Path):
    """A source archived over two runs, the second after the site renamed its price class."""
    location = tmp_path / "archive"
    output = {"key": ["url"], "history": True, "archive": {"enabled": True, "location": f"file://{location}"}}
    listing = {"link_selectors": ["a.product-link"], "follow": r"^http://127\.0\.0\.1:\d+/product/\d+$",
               "max_depth": 0}
    source = write_source("drifting", listing=listing, output=output)
    harvest(crawl, source, demo_site, "before")
    restyle(demo_site, "?price=cost")
    try:
        harvest(crawl, source, demo_site, "drifted", details=True)
    finally:
        restyle(demo_site, "")
    fixed_attributes = {**source.model_dump(mode="json")["attributes"], "price": {"css": ".cost", "type": "float"}}
    fixed = write_source("drifting", listing=listing, output=output, attributes=fixed_attributes)
    return source, fixed


def test_reextraction_since_the_drift_repairs_every_record_without_a_request(
        drifted, crawl, demo_site, mongo_server, worker_settings) -> None:
    source, fixed = drifted
    collection = records(mongo_server, worker_settings, source)
    drifted_records = list(collection.find({"url": {"$regex": "/product/"}}))
    assert len(drifted_records) == len(PRODUCTS) and all(record.get("price") is None for record in drifted_records)
    requests_before = demo_site.client_stats(source.name)["total"]
    report = Reextraction.from_settings(worker_settings).run(fixed, since=timedelta(hours=1))
    assert demo_site.client_stats(source.name)["total"] == requests_before  # no request reached the site
    assert report["requests"] == 0 and report["records_stored"] == len(PRODUCTS)
    assert report["records_changed"] == len(PRODUCTS) and report["quality"]["outcome"] == "green"
    assert report.get("links_followed_in_archive", 0) == 0  # every product page was in the window already
    repaired = {record["url"]: record for record in collection.find({"url": {"$regex": "/product/"}})}
    assert all(isinstance(record["price"], float) for record in repaired.values())
    history = mongo_server.client()[worker_settings.mongo_database][f"{source.output_collection}_history"]
    assert history.count_documents({"run_id": report["run_id"]}) == len(PRODUCTS)
    run = mongo_server.client()[worker_settings.mongo_database]["runs"].find_one({"run_id": report["run_id"]})
    assert run["status"] == "reported" and run["report"]["kind"] == "reextraction"  # a run of its own
    # when it ended and how long it took, as a harvest's report says (the runs list, the Asset event's extra)
    assert run["report"]["finished_at"] > run["started_at"] and run["report"]["duration_seconds"] > 0


def test_reextraction_of_a_run_follows_listing_links_inside_the_archive_only(
        drifted, crawl, demo_site, mongo_server, worker_settings) -> None:
    _, fixed = drifted
    harvest(crawl, fixed, demo_site, "listing-only")  # known product pages are not fetched again: the listing only
    reextraction = Reextraction.from_settings(worker_settings)
    assert [row["kind"] for row in reextraction.index.latest(fixed.name, run="listing-only")] == ["listing"]
    requests_before = demo_site.client_stats(fixed.name)["total"]
    report = reextraction.run(fixed, archived_run="listing-only")
    assert demo_site.client_stats(fixed.name)["total"] == requests_before
    assert report["links_followed_in_archive"] == len(PRODUCTS)  # their latest archived pages, from the drifted run
    assert report["pages_read"] == len(PRODUCTS) + 1 and report["records_stored"] == len(PRODUCTS)
    prices = [record.get("price") for record in records(mongo_server, worker_settings, fixed).find(
        {"url": {"$regex": "/product/"}})]
    assert len(prices) == len(PRODUCTS) and all(isinstance(price, float) for price in prices)


def test_a_challenge_archived_as_a_pages_latest_response_is_read_past_to_the_page_before_it(
        drifted, crawl, demo_site, mongo_server, worker_settings) -> None:
    """A WAF's challenge (answered 200, "Just a moment...") archived as the latest response of product pages: the
    re-extraction reads the response archived before it, so the fix repairs those records too (read as the page,
    the challenge was a block: the record kept its drifted null)."""
    source, fixed = drifted
    wall = urllib.request.Request(f"{demo_site.url}/_challenge?after=1&window=600&status=200", method="POST",
                                  data=b"")
    urllib.request.urlopen(wall, timeout=5).close()
    restyle(demo_site, "?price=cost")  # still drifted: the page that gets through is read with the fix too
    try:
        crawl.push(source, *[TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/{number}",
                                         run_id="challenged") for number in PRODUCTS])
        reextraction = Reextraction.from_settings(worker_settings)
        deadline = time.monotonic() + 60
        while len(reextraction.index.latest(source.name, run="challenged")) < len(PRODUCTS):  # each page once
            assert time.monotonic() < deadline, "the challenged run's pages were not all fetched"
            crawl.step(source, len(PRODUCTS))
            assert crawl.runner.archive.flush()
    finally:
        restyle(demo_site, "")
        urllib.request.urlopen(urllib.request.Request(f"{demo_site.url}/_challenge", method="POST", data=b""),
                               timeout=5).close()
    statuses = [row["status"] for row in reextraction.index.latest(source.name, run="challenged")]
    assert statuses == [200] * len(PRODUCTS)  # challenges look like pages to the archive
    report = reextraction.run(fixed, since=timedelta(hours=1))
    assert report["read_earlier"] == len(PRODUCTS) - 1 and report["blocked"] == len(PRODUCTS) - 1, report
    assert report.get("no_page_archived", 0) == 0 and report["quality"]["outcome"] == "green", report
    prices = [record.get("price") for record in records(mongo_server, worker_settings, fixed).find(
        {"url": {"$regex": "/product/"}})]
    assert len(prices) == len(PRODUCTS) and all(isinstance(price, float) for price in prices), prices


def test_archived_pages_that_cannot_be_read_fail_the_reextraction_and_leave_their_records(
        drifted, mongo_server, worker_settings, tmp_path) -> None:
    """Files deleted outside the retention (by hand, by a bucket's own expiry) leave index rows that point nowhere:
    their pages are the run's failures, named in the report, and its quality says so (it was green with every
    page unreadable)."""
    _, fixed = drifted
    drifted_files = sorted((tmp_path / "archive").rglob("drifted/*.warc.gz"))
    assert drifted_files
    for path in drifted_files:
        path.unlink()
    report = Reextraction.from_settings(worker_settings).run(fixed, archived_run="drifted")
    assert report["archive_unreadable"] == len(PRODUCTS)  # (the listing is a revisit of the run before's page)
    assert report["failures_by_reason"]["archived page unreadable"] == len(PRODUCTS)
    assert report["tasks_failed"] == len(PRODUCTS) and report["quality"]["outcome"] != "green", report["quality"]
    prices = [record.get("price") for record in records(mongo_server, worker_settings, fixed).find(
        {"url": {"$regex": "/product/"}})]
    assert prices == [None] * len(PRODUCTS)  # left as the drifted run stored them


def test_the_reextract_command_names_the_run_and_fails_on_an_unknown_source(
        drifted, worker_settings, demo_site) -> None:
    _, fixed = drifted
    requests_before = demo_site.client_stats(fixed.name)["total"]
    done = subprocess.run([str(VENV_BIN / "harvester"), "reextract", fixed.name, "--since", "1h", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["run_id"].startswith("reextract-") and report["records_stored"] == len(PRODUCTS)
    assert demo_site.client_stats(fixed.name)["total"] == requests_before
    unknown = subprocess.run([str(VENV_BIN / "harvester"), "reextract", "nobody_has_this"],
                             capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "nobody_has_this" in unknown.stdout
    assert yaml.safe_load((worker_settings.sources_dir / "drifting.yaml").read_text())["attributes"]["price"][
        "css"] == ".cost"


def test_pages_read_in_forked_processes_store_what_the_reextractions_own_process_reads(
        drifted, mongo_server, worker_settings) -> None:
    _, fixed = drifted
    reports = []
    for processes in (2, 1):
        reextraction = Reextraction.from_settings(worker_settings.model_copy(update={"reextract_processes": processes}))
        reextraction.pool_from_pages = 1  # the window is a listing and six pages: read in processes all the same
        reports.append(reextraction.run(fixed, since=timedelta(hours=1)))
    forked, own = reports
    assert forked["reader_processes"] == 2 and own["reader_processes"] == 1
    assert forked["records_changed"] == len(PRODUCTS)  # the forked readers repaired every record...
    assert own["records_unchanged"] == len(PRODUCTS) and own["records_changed"] == 0  # ...as this process reads them
    figures = ("pages_read", "records_stored", "records_extracted", "quality")
    assert {name: forked[name] for name in figures} == {name: own[name] for name in figures}
    assert "page_reader_lost" not in forked


def test_a_page_reader_process_that_dies_leaves_its_pages_to_the_reextractions_own_process(
        write_source, demo_site, worker_settings, caplog) -> None:
    from datetime import UTC, datetime

    import psutil
    from harvester.producer.reextraction_pages import PageReaders
    from harvester.storage import ArchivedResponse

    source = write_source("dying_readers")
    works = []
    for number in PRODUCTS:
        url = f"{demo_site.url}/product/{number}"
        with urllib.request.urlopen(url, timeout=5) as response:
            works.append((url, "details", 0, ArchivedResponse(url, url, 200, list(response.headers.items()),
                                                              response.read(), datetime.now(UTC), "run")))
    here = PageReaders(source, worker_settings, 1).start(works)()
    with PageReaders(source, worker_settings, 2) as readers:
        first = readers.start(works)()
        for child in psutil.Process().children():  # the pool's children, killed as an out-of-memory kill would
            if child.cmdline() == psutil.Process().cmdline():
                child.kill()
        pending = readers.start(works)  # submitted to a pool whose children are dead, or found dead on waiting
        second = pending()
        assert readers.lost and readers.processes == 1
    assert [page.records for page in first] == [page.records for page in here] == [page.records for page in second]
    assert all(page.records and page.records[0]["price"] is not None for page in here)
    assert "page readers failed (BrokenProcessPool" in caplog.text


def test_a_daemonic_process_reads_its_pages_itself() -> None:
    import multiprocessing

    from harvester.producer.reextraction_pages import pool_processes

    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    daemon = context.Process(target=lambda: answers.put(pool_processes(4)), daemon=True)
    daemon.start()
    daemon.join(30)
    assert answers.get(timeout=5) == 1  # multiprocessing refuses children to a daemonic process: it reads itself
    assert pool_processes(4) == 4


READERS_THEN_WAIT = """
import os, sys, time
from datetime import UTC, datetime
import psutil
from harvester.config import SourceConfig
from harvester.producer.reextraction_pages import PageReaders
from harvester.settings import get_settings
from harvester.storage import ArchivedResponse

source = SourceConfig.model_validate({"name": "shop", "attributes": {"t": "h1"},
                                      "input": {"kind": "details", "seeds": ["http://a.example/1"]}})
page = ArchivedResponse("http://a.example/1", "http://a.example/1", 200, [("Content-Type", "text/html")],
                        b"<h1>Kept</h1>", datetime.now(UTC), "run")
readers = PageReaders(source, get_settings(), 2)
assert readers.start([("http://a.example/1", "details", 0, page)] * 60)()[0].records[0]["t"] == "Kept"
print(" ".join(str(child.pid) for child in psutil.Process().children()), flush=True)
time.sleep(120)
"""


def test_page_readers_end_when_the_reextraction_is_killed_outright(worker_settings) -> None:
    import os
    import signal
    import time

    import psutil

    parent = subprocess.Popen([str(VENV_BIN / "python"), "-c", READERS_THEN_WAIT], stdout=subprocess.PIPE,
                              text=True, env={**os.environ})
    try:
        children = [psutil.Process(int(pid)) for pid in parent.stdout.readline().split()]
        assert len(children) == 2 and all(child.is_running() for child in children)
        parent.send_signal(signal.SIGKILL)  # no shutdown, no atexit: what the out-of-memory killer does
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE
                                                  for child in children):
            time.sleep(0.2)
        assert not any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE for child in children)
    finally:
        parent.kill()
