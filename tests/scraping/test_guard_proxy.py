"""The browser's guard proxy (scraping.browser.guard_proxy) on its own, without Chromium: what it answers a client
that asks for what it must not reach, asks malformed, or whose way out fails. Real sockets on loopback:
the proxy, a recording site, a country proxy that refuses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from harvester.scraping.browser.guard_proxy import REFUSED_HEADER, GuardProxy, UpstreamProxy
from harvester.scraping.fetching.addresses import AddressGuard, parse_allowed_networks
from harvester.services.ports import free_port

pytestmark = pytest.mark.integration


async def ask(proxy: GuardProxy, head: bytes, timeout: float = 10.0) -> bytes:
    """Send ``head`` to the proxy and read its whole answer (it closes each connection it answers)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", int(proxy.server.rsplit(":", 1)[1]))
    try:
        writer.write(head)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


def with_proxy(guard: AddressGuard, scenario: Callable[[GuardProxy], Awaitable[None]],
               upstream: UpstreamProxy | None = None) -> None:
    async def run() -> None:
        proxy = GuardProxy(guard, upstream, connect_timeout=5)
        await proxy.start()
        try:
            await scenario(proxy)
        finally:
            await proxy.close()

    asyncio.run(run())


def test_refused_names_and_addresses_are_answered_403_with_the_reason_and_remembered() -> None:
    async def scenario(proxy: GuardProxy) -> None:
        mark = proxy.refused
        tunnel = await ask(proxy, b"CONNECT secret.localhost:443 HTTP/1.1\r\nHost: secret.localhost:443\r\n\r\n")
        plain = await ask(proxy, b"GET http://169.254.169.254/latest/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n")
        assert tunnel.startswith(b"HTTP/1.1 403") and b"loopback name" in tunnel
        assert plain.startswith(b"HTTP/1.1 403") and REFUSED_HEADER.encode() in plain and b"link-local" in plain
        assert [(refusal.host, refusal.port) for refusal in proxy.refusals_since(mark)] == [
            ("secret.localhost", 443), ("169.254.169.254", 80)]

    with_proxy(AddressGuard(), scenario)


def test_a_name_that_does_not_resolve_is_refused_not_passed() -> None:
    async def scenario(proxy: GuardProxy) -> None:
        answer = await ask(proxy, b"CONNECT no-such-host.invalid:443 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403") and b"does not resolve" in answer

    with_proxy(AddressGuard(), scenario)


def test_the_guard_never_tunnels_to_itself_even_where_loopback_is_allowed() -> None:
    async def scenario(proxy: GuardProxy) -> None:
        port = proxy.server.rsplit(":", 1)[1]
        answer = await ask(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403") and b"the browser guard itself" in answer

    with_proxy(AddressGuard(parse_allowed_networks("127.0.0.1/32")), scenario)


@pytest.mark.parametrize("head,reason", [
    (b"CONNECT no-port HTTP/1.1\r\n\r\n", b"bad CONNECT target"),
    (b"GET /relative HTTP/1.1\r\nHost: example.org\r\n\r\n", b"not an absolute http:// request"),
    (b"GET https://example.org/ HTTP/1.1\r\n\r\n", b"not an absolute http:// request"),
])
def test_malformed_requests_are_answered_400(head: bytes, reason: bytes) -> None:
    async def scenario(proxy: GuardProxy) -> None:
        answer = await ask(proxy, head)
        assert answer.startswith(b"HTTP/1.1 400") and reason in answer

    with_proxy(AddressGuard(), scenario)


def test_a_head_larger_than_the_cap_closes_the_connection_without_waiting() -> None:
    async def scenario(proxy: GuardProxy) -> None:
        answer = await ask(proxy, b"GET http://example.org/ HTTP/1.1\r\nX-Long: " + b"a" * (80 * 1024), timeout=5)
        assert answer == b""  # closed at once: nothing relayed, no hang until a timeout

    with_proxy(AddressGuard(), scenario)


def test_a_closed_port_and_a_refusing_country_proxy_are_answered_502() -> None:
    closed = free_port("127.0.0.1")

    async def refusing_upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def scenario(proxy: GuardProxy) -> None:
        answer = await ask(proxy, f"CONNECT 127.0.0.1:{closed} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 502") and b"tunnel to 127.0.0.1" in answer

    guard = AddressGuard(parse_allowed_networks("127.0.0.1/32"))
    with_proxy(guard, scenario)

    async def through_country_proxy() -> None:
        server = await asyncio.start_server(refusing_upstream, "127.0.0.1", 0)
        upstream = UpstreamProxy.from_server(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", "u", "p")
        proxy = GuardProxy(guard, upstream, connect_timeout=5)
        await proxy.start()
        try:
            answer = await ask(proxy, f"CONNECT 127.0.0.1:{closed} HTTP/1.1\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 502") and b"UpstreamError" in answer and b"407" in answer
        finally:
            await proxy.close()
            server.close()

    asyncio.run(through_country_proxy())


def test_a_plain_request_is_relayed_without_proxy_headers_and_counted(site) -> None:
    site.route("/page", text="hello", content_type="text/plain")

    async def scenario(proxy: GuardProxy) -> None:
        head = (f"GET {site.url}/page?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{site.port}\r\n"
                "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n\r\n").encode()
        answer = await ask(proxy, head)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello")
        assert proxy.bytes_relayed >= len(answer)

    with_proxy(AddressGuard(parse_allowed_networks("127.0.0.1/32")), scenario)
    seen = site.seen[-1]
    assert seen.path == "/page?q=1"
    assert "proxy-authorization" not in seen.headers and "proxy-connection" not in seen.headers
