"""The batch fetcher of an incremental batch (conditional requests, sitemaps, requests with a body) reports what
the page fetcher's robots.txt counted, as the page fetcher's own batches do: the counters are drained per batch,
so none is lost and none piles up in the worker's long-lived fetcher."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from harvester.config.model import SourceConfig
from harvester.distributor import TaskMessage
from harvester.settings import HarvesterSettings
from harvester.workers.batch import BatchRunner
from harvester.workers.incremental import BatchFetcher

from tests.fixtures.demo_site import demo_source_document

pytestmark = pytest.mark.integration

ROBOTS_TXT = "User-agent: *\nDisallow: /private/\n" + "".join(f"Disallow: /hidden-{n}/\n" for n in range(20))


class RobotsSite(BaseHTTPRequestHandler):
    """A site whose robots.txt has more rules than the worker keeps (it keeps the first, /private/)."""

    def do_GET(self) -> None:  # http.server calls it by this name
        body = (ROBOTS_TXT if self.path == "/robots.txt" else "<html><h1 class=title>t</h1></html>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain" if self.path == "/robots.txt" else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def robots_site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), RobotsSite)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def bounded_robots_runner(configure_settings) -> Iterator[BatchRunner]:
    """A worker that keeps ten rules of a robots.txt (the fewest it may keep)."""
    settings: HarvesterSettings = configure_settings(robots_max_rules=10)
    runner = BatchRunner(settings)
    yield runner
    runner.close()


@pytest.mark.parametrize("incremental", [False, True], ids=["page_fetcher", "batch_fetcher"])
def test_an_incremental_batch_counts_robots_txt_as_a_plain_one_does(bounded_robots_runner, robots_site,
                                                                    incremental) -> None:
    runner = bounded_robots_runner
    source = SourceConfig.model_validate(demo_source_document(robots_site, "robots_counted"))
    urls = [f"{robots_site}/private/1", f"{robots_site}/product/1"]
    messages = [TaskMessage(source=source.name, url=url) for url in urls]
    fetcher = (BatchFetcher(runner.fetcher, runner.incremental.sitemaps, messages, {"unused": {}}) if incremental
               else runner.fetcher)
    fetched = runner.loop.run_until_complete(fetcher.fetch_all(urls, source))
    assert [result.outcome for result in fetched.results] == ["robots_disallowed", "ok"]
    assert fetched.outcomes["robots_rules_dropped"] == 11  # 21 rules, 10 kept
    assert not runner.robots.outcomes  # drained: nothing left for a later batch to misreport
