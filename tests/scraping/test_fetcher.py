"""The fetcher against the real demo site: one test per fault a site can throw at us."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from harvester.config import SourceConfig
from harvester.scraping.fetching.fetcher import Fetcher, FetchResult, parse_retry_after
from harvester.scraping.page import process_page
from harvester.services.ports import free_port
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source, demo_source_document

pytestmark = pytest.mark.integration


def fetch(url: str, timeout: float = 5, **settings: object) -> FetchResult:
    source = demo_source("http://127.0.0.1:9", timeout=timeout)

    async def run() -> FetchResult:
        async with Fetcher(HarvesterSettings(**settings)) as fetcher:
            return await fetcher.fetch(url, source)

    return asyncio.run(run())


def test_ok_page(demo_site) -> None:
    result = fetch(f"{demo_site.url}/product/7")
    assert result.ok and result.status == 200 and "SKU-00007" in result.text and not result.truncated


def test_dead_host_is_a_retryable_host_unreachable() -> None:
    """A refused connection is host_unreachable (the host's breaker counts it), retried like any transient failure."""
    result = fetch(f"http://127.0.0.1:{free_port()}/product/1")
    assert result.outcome == "host_unreachable" and result.retryable


def test_timeout_is_retryable(demo_site) -> None:
    result = fetch(f"{demo_site.url}/slow/1?delay=3", timeout=0.5)
    assert result.outcome == "timeout" and result.retryable
    assert result.elapsed < 2


def test_500_then_success_on_retry(demo_site) -> None:
    first = fetch(f"{demo_site.url}/flaky/fetcher?fail=1")
    assert first.outcome == "http_error" and first.status == 500 and first.retryable and first.counter == "http_500"
    assert fetch(f"{demo_site.url}/flaky/fetcher?fail=1").ok


def test_429_carries_retry_after(demo_site) -> None:
    result = fetch(f"{demo_site.url}/ratelimited/fetcher?retry_after=7")
    assert result.status == 429 and result.retry_after == 7 and result.retryable


def test_404_is_not_retryable(demo_site) -> None:
    result = fetch(f"{demo_site.url}/product/99999")
    assert result.outcome == "http_error" and result.status == 404 and not result.retryable


def test_blocked(demo_site) -> None:
    assert fetch(f"{demo_site.url}/blocked").outcome == "blocked"


def test_redirect_loop_is_capped_and_a_chain_is_followed(demo_site) -> None:
    loop = fetch(f"{demo_site.url}/redirect-loop/a", max_redirects=5)
    assert loop.outcome == "too_many_redirects" and not loop.retryable
    chain = fetch(f"{demo_site.url}/redirect/3", max_redirects=5)
    assert chain.ok and chain.final_url.endswith("/product/3")


def test_body_over_the_cap_is_cut(demo_site) -> None:
    result = fetch(f"{demo_site.url}/huge?mb=4", body_size_cap_bytes=256 * 1024)
    assert result.ok and result.truncated and result.size == 256 * 1024
    page = process_page(demo_source(demo_site.url), "details", f"{demo_site.url}/huge", 0, result)
    assert page.extraction is not None and page.extraction.record is not None
    assert page.extraction.record["sku"] == "SKU-00004"


def test_non_html_content_type_is_a_parse_error(demo_site) -> None:
    result = fetch(f"{demo_site.url}/data.json")
    assert result.outcome == "parse_error" and "application/json" in result.reason and not result.retryable


def test_malformed_html_and_wrong_types_extract_what_is_there(demo_site) -> None:
    source = demo_source(demo_site.url)
    malformed = process_page(source, "details", f"{demo_site.url}/malformed", 0, fetch(f"{demo_site.url}/malformed"))
    assert malformed.extraction.record["sku"] == "SKU-00005"
    wrong = process_page(source, "details", f"{demo_site.url}/wrong-type/3", 0,
                         fetch(f"{demo_site.url}/wrong-type/3"))
    assert wrong.extraction.record["price"] is None
    assert {"wrong_type:price", "wrong_type:stock"} <= {problem.counter for problem in wrong.extraction.problems}


def test_source_headers_are_sent(demo_site) -> None:
    fetch(f"{demo_site.url}/product/1")
    assert demo_site.client_stats("demo_test")["total"] == 1


def test_retry_after_parsing() -> None:
    assert parse_retry_after("12") == 12
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470) == 10
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def _try(tmp_path: Path, document: dict, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "source.yaml"
    path.write_text(yaml.safe_dump(document))
    return subprocess.run([sys.executable, "-m", "harvester.cli", "try", str(path), *args],
                          capture_output=True, text=True, timeout=120)


def test_harvester_try_prints_record_problems_and_links(demo_site, tmp_path) -> None:
    document = demo_source_document(demo_site.url)
    listing = _try(tmp_path, document)
    assert listing.returncode == 0, listing.stderr
    assert f"{demo_site.url}/product/1\n" in listing.stdout and "listing pages it would queue (1)" in listing.stdout
    detail = _try(tmp_path, document, f"{demo_site.url}/product/10", "--json")
    report = yaml.safe_load(detail.stdout.splitlines()[-1])
    assert report["record"]["sku"] == "SKU-00010" and report["problems"] == ["description: missing "
                                                                               "(the selector matched nothing)"]
    rejected = _try(tmp_path, document, f"{demo_site.url}/status/500")
    assert rejected.returncode == 1 and "http_500" in rejected.stdout


@pytest.mark.slow
def test_harvester_try_renders_browser_sources_in_chromium(demo_site, tmp_path) -> None:
    document = demo_source_document(demo_site.url, render="browser", country="SG")
    http_only = _try(tmp_path, demo_source_document(demo_site.url), f"{demo_site.url}/js/product/8", "--json")
    assert "REJECTED" not in http_only.stdout and http_only.returncode == 1  # sku missing without JavaScript
    rendered = _try(tmp_path, document, f"{demo_site.url}/js/product/8", "--json")
    report = yaml.safe_load(rendered.stdout.splitlines()[-1])
    assert rendered.returncode == 0, rendered.stderr
    assert report["record"]["sku"] == "SKU-00008"
    assert report["blocked_requests"] >= 2  # the product photo and the font (images and fonts are blocked)


def test_harvester_try_names_the_config_error(tmp_path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\ninput: {seeds: [http://127.0.0.1:9/]}\n"
                    "attributes: {sku: {css: '.sku', type: money}}\n")
    completed = subprocess.run([sys.executable, "-m", "harvester.cli", "try", str(path)],
                               capture_output=True, text=True, timeout=60)
    assert completed.returncode == 2
    assert "broken.yaml" in completed.stderr and "attributes.sku.type" in completed.stderr


def archiving_fetch(url: str, timeout: float = 5) -> FetchResult:
    document = demo_source_document("http://127.0.0.1:9", timeout=timeout, robots="ignore")
    document["output"] = {**document.get("output", {}), "archive": {"enabled": True, "location": "file:///tmp/unused"}}
    source = SourceConfig.model_validate(document)

    async def run() -> FetchResult:
        async with Fetcher(HarvesterSettings()) as fetcher:
            return await fetcher.fetch(url, source)

    return asyncio.run(run())


def test_a_failed_status_is_archived_with_its_body_and_a_body_cut_short_leaves_the_status_standing(demo_site) -> None:
    """What a site answered with a failing status is archived (the latest archived response of a URL is what the
    site last said). A body that cannot be read is archived empty: the fetch's outcome is its status's still."""
    missing = archiving_fetch(f"{demo_site.url}/product/99999")
    assert missing.outcome == "http_error" and missing.status == 404 and not missing.text
    assert missing.exchange is not None and missing.exchange.status == 404 and missing.exchange.body
    assert missing.transferred > len(missing.exchange.body)

    cut = failed_status_fetch(lambda connection, finished: None)  # the connection closes after "<html>"
    assert cut.outcome == "http_error" and cut.status == 503 and cut.retryable
    assert cut.exchange is not None and cut.exchange.status == 503 and cut.exchange.body == b""


def failed_status_fetch(then: Callable[[socket.socket, threading.Event], None], timeout: float = 5) -> FetchResult:
    """An archiving fetch from a one-connection server that answers a 503 head announcing 100,000 bytes and sends
    "<html>", then does ``then(connection, finished)`` (``finished`` is set once the fetch returned)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        finished = threading.Event()

        def answer() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\n"
                                   b"Content-Length: 100000\r\n\r\n<html>")
                then(connection, finished)

        serving = threading.Thread(target=answer, daemon=True)
        serving.start()
        try:
            return archiving_fetch(f"http://127.0.0.1:{server.getsockname()[1]}/product/1", timeout=timeout)
        finally:
            finished.set()
            serving.join(5)


def test_a_failed_status_whose_body_trickles_keeps_its_status_within_the_fetchs_timeout() -> None:
    """An archived source reads a failed response's body for the archive, never past the fetch's own timeout: a 503
    whose body never ends is still this page's 503 (``http_error``, archived empty), not a ``timeout``."""
    def trickle(connection: socket.socket, finished: threading.Event) -> None:
        while not finished.wait(0.2):  # a byte now and then: the read never fails, never ends
            with contextlib.suppress(OSError):
                connection.sendall(b" ")

    trickled = failed_status_fetch(trickle, timeout=3)
    assert trickled.outcome == "http_error" and trickled.status == 503, (trickled.outcome, trickled.reason)
    assert trickled.exchange is not None and trickled.exchange.status == 503 and trickled.exchange.body == b""
    assert trickled.elapsed < 3
