"""What a site's wire-level misbehaviour becomes, through both HTTP transports (aiohttp, the default, and
httpx under HARVESTER_HTTP2): a raw socket server sends exactly the bytes each case needs."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from harvester.scraping.fetching.fetcher import Fetcher, FetchResult
from harvester.services.ports import LOOPBACK, free_port
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration
PAGE = b"<html><body><span class='sku'>SKU-RAW</span></body></html>"


def response(*headers: str, body: bytes = PAGE, length: int | None = None) -> bytes:
    lines = ["HTTP/1.1 200 OK", "Content-Type: text/html; charset=utf-8",
             f"Content-Length: {len(body) if length is None else length}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


CASES = {
    # the body ends (the server closes) 40 bytes into a declared 1,000
    "/short": response(body=PAGE[:40], length=1000),
    # a 20 KB Set-Cookie header, as some sites send: more than aiohttp's default 8,190-byte line limit
    "/long-header": response("Set-Cookie: session=" + "x" * 20_000),
    "/not-http": b"SSH-2.0-OpenSSH_9.2\r\n",
}


@pytest.fixture
def raw_site() -> Iterator[str]:
    """Answers each request with the canned bytes of its path, then closes the connection."""
    listener = socket.create_server((LOOPBACK, free_port()))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                request = connection.recv(65536).decode(errors="replace")
                path = request.split(" ", 2)[1] if request.count(" ") >= 2 else "/"
                connection.sendall(CASES.get(path, response()))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://{LOOPBACK}:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    listener.close()


def fetch(url: str, http2: bool) -> FetchResult:
    source = demo_source(url, robots="ignore", timeout=5, retries=0)

    async def run() -> FetchResult:
        async with Fetcher(HarvesterSettings(http2=http2)) as fetcher:
            return await fetcher.fetch(url, source)

    return asyncio.run(run())


@pytest.mark.parametrize("http2", [False, True], ids=["aiohttp", "httpx"])
def test_a_body_cut_short_is_a_retryable_connection_error(raw_site: str, http2: bool) -> None:
    result = fetch(f"{raw_site}/short", http2)
    assert result.outcome == "connection_error" and result.retryable, (result.outcome, result.reason)


@pytest.mark.parametrize("http2", [False, True], ids=["aiohttp", "httpx"])
def test_a_long_header_line_is_accepted(raw_site: str, http2: bool) -> None:
    result = fetch(f"{raw_site}/long-header", http2)
    assert result.ok and "SKU-RAW" in result.text, (result.outcome, result.reason)


@pytest.mark.parametrize("http2", [False, True], ids=["aiohttp", "httpx"])
def test_a_server_that_does_not_speak_http_is_a_connection_error(raw_site: str, http2: bool) -> None:
    result = fetch(f"{raw_site}/not-http", http2)
    assert result.outcome == "connection_error" and result.reason, (result.outcome, result.reason)


@pytest.mark.parametrize("http2", [False, True], ids=["aiohttp", "httpx"])
def test_an_ordinary_page_comes_through_either_transport(raw_site: str, http2: bool) -> None:
    result = fetch(f"{raw_site}/page", http2)
    assert (result.ok, result.status, result.http_version) == (True, 200, "HTTP/1.1")
    assert "SKU-RAW" in result.text
