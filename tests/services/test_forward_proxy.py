"""The counting forward proxy relays to loopback upstreams only: Chromium opens tunnels of its own (to
Google's sign-in hosts) through any proxy it is given, and nothing from a test may leave this machine."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from harvester.services.forward_proxy import ForwardProxy
from harvester.services.ports import LOOPBACK, free_port


async def _ask(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.close()
    return answer


async def _upstream_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A loopback upstream that answers a request 200 with the body ``ok``."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def _serving(proxy: ForwardProxy) -> AsyncIterator[int]:
    """The proxy serving on a free port (yielded) once it accepts connections; stopped after."""
    port = free_port()
    server = asyncio.create_task(proxy.serve(LOOPBACK, port))
    try:
        for _ in range(100):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection(LOOPBACK, port)
                writer.close()
                break
            await asyncio.sleep(0.05)
        yield port
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


async def _with_proxy(proxy: ForwardProxy, requests: list[bytes]) -> list[bytes]:
    async with _serving(proxy) as port:
        return [await _ask(port, request) for request in requests]


@pytest.mark.unit
def test_tunnels_and_requests_to_other_than_loopback_are_refused_and_counted() -> None:
    proxy = ForwardProxy("SG")
    # IP literals: refusing them needs no name lookup, so the test itself sends nothing off this machine
    answers = asyncio.run(_with_proxy(proxy, [
        b"CONNECT 10.255.255.1:443 HTTP/1.1\r\nHost: 10.255.255.1:443\r\n\r\n",
        b"GET http://192.0.2.7/ HTTP/1.1\r\nHost: 192.0.2.7\r\n\r\n",
    ]))
    assert all(answer.startswith(b"HTTP/1.1 403") for answer in answers)
    assert proxy.counters.refused == {"10.255.255.1:443": 1, "192.0.2.7": 1}
    assert proxy.counters.requests == 0


@pytest.mark.unit
def test_loopback_upstreams_are_relayed() -> None:
    proxy = ForwardProxy("SG")
    upstream_port = free_port()

    async def scenario() -> list[bytes]:
        upstream = await asyncio.start_server(_upstream_ok, LOOPBACK, upstream_port)
        async with upstream:
            return await _with_proxy(proxy, [
                f"GET http://{LOOPBACK}:{upstream_port}/page HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                f"CONNECT {LOOPBACK}:{upstream_port} HTTP/1.1\r\n\r\n".encode(),
            ])

    answers = asyncio.run(scenario())
    assert answers[0].startswith(b"HTTP/1.1 200 OK") and answers[1].startswith(b"HTTP/1.1 200 Connection")
    assert proxy.counters.refused == {} and proxy.counters.requests == 2


@pytest.mark.unit
def test_plain_http_through_a_tunnel_is_recorded_by_url() -> None:
    """Playwright's route.fetch tunnels http:// through CONNECT: the test proxy still sees which pages."""
    proxy = ForwardProxy("SG")
    upstream_port = free_port()

    async def scenario() -> bytes:
        upstream = await asyncio.start_server(_upstream_ok, LOOPBACK, upstream_port)
        async with upstream, _serving(proxy) as port:
            reader, writer = await asyncio.open_connection(LOOPBACK, port)
            writer.write(f"CONNECT {LOOPBACK}:{upstream_port} HTTP/1.1\r\n\r\n".encode())
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"GET /js/product/7?x=1 HTTP/1.1\r\nHost: shop\r\n\r\n")
            await writer.drain()
            body = await asyncio.wait_for(reader.readuntil(b"\r\n\r\nok"), 10)
            writer.close()
        return body

    assert asyncio.run(scenario()).endswith(b"ok")
    assert proxy.counters.urls == [f"http://{LOOPBACK}:{upstream_port}/js/product/7?x=1"]
