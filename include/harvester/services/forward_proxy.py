"""A small HTTP forward proxy that counts what passes through it (`harvester forward-proxy`).

`make run` starts one per demo country so browser slots browse through a proxy as in production, and the
tests and the benchmark start one per country on loopback to see which pages went through which proxy
and how many bytes they cost. Plain HTTP in absolute form (``GET http://host/path``), one request per
upstream connection (``Connection: close``), and CONNECT tunnels for HTTPS. ``GET /_proxy/stats`` (origin
form, asked of the proxy itself) answers what it counted; ``POST /_proxy/reset`` starts again.

It relays only to loopback upstreams unless started with ``allow_any_upstream``: it is a demo and test
tool, and Chromium opens tunnels of its own (to Google's sign-in hosts) through whatever proxy it is given,
which must never leave this machine from a test. Refused upstreams answer 403 and are counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import re
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("harvester.forward_proxy")
MAX_HEAD_BYTES = 64 * 1024
_REQUEST_LINE = re.compile(rb"(?:^|\r\n)(?:GET|HEAD|POST|PUT|DELETE|OPTIONS|PATCH) (/\S*) HTTP/1\.[01]\r\n")
RECENT_URLS = 5000


@dataclass
class ProxyCounters:
    """What went through: requests and bytes per upstream host, the URLs (most recent first out)."""

    label: str
    requests: int = 0
    bytes_to_client: int = 0  # response bytes relayed (headers and bodies)
    bytes_to_upstream: int = 0  # request bytes relayed
    by_host: Counter[str] = field(default_factory=Counter)
    bytes_by_host: Counter[str] = field(default_factory=Counter)
    urls: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)  # upstreams refused (not loopback), by host

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "requests": self.requests, "bytes_to_client": self.bytes_to_client,
                "refused": dict(self.refused),
                "bytes_to_upstream": self.bytes_to_upstream, "bytes": self.bytes_to_client + self.bytes_to_upstream,
                "by_host": dict(self.by_host), "bytes_by_host": dict(self.bytes_by_host), "urls": list(self.urls)}

    def reset(self) -> None:
        self.__dict__.update(vars(type(self)(self.label)))  # every counter back to its default, declared once


class ForwardProxy:
    """``await ForwardProxy(label).serve(host, port)``."""

    def __init__(self, label: str = "proxy", allow_any_upstream: bool = False,
                 source_address: str | None = None) -> None:
        self.counters = ProxyCounters(label)
        # the address its upstream connections leave from (a loopback address of its own, 127.0.0.2, ...), so a
        # site on this machine tells the proxies apart as a real site tells proxies' exit addresses apart
        self.local_addr = (source_address, 0) if source_address else None
        self.allow_any_upstream = allow_any_upstream

    async def _upstream_allowed(self, host: str, port: int) -> bool:
        """Loopback only (unless allowed): every address the name resolves to must be a loopback one."""
        if self.allow_any_upstream:
            return True
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            return False
        addresses = {info[4][0] for info in infos}
        return bool(addresses) and all(ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
                                       for address in addresses)

    async def _refuse(self, host: str, writer: asyncio.StreamWriter) -> None:
        self.counters.refused[host] += 1
        message = f"forward proxy relays only to loopback upstreams, not {host}".encode()
        writer.write(b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: "
                     + str(len(message)).encode() + b"\r\n\r\n" + message)
        await writer.drain()

    async def serve(self, host: str, port: int) -> None:
        server = await asyncio.start_server(self._client, host, port, limit=MAX_HEAD_BYTES)
        async with server:
            await server.serve_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                keep_open = await self._request(head, reader, writer)
                if not keep_open:
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):  # the peer may already be gone; the connection is closed either way
                await writer.wait_closed()

    async def _request(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        request_line, _, header_block = head.decode("latin-1").partition("\r\n")
        method, target, version = ([*request_line.split(" "), "", "", ""])[:3]
        if method == "CONNECT":
            await self._tunnel(target, reader, writer)
            return False
        if target.startswith("/_proxy/"):
            return await self._own(method, target, writer)
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.hostname:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return False
        headers = [line for line in header_block.split("\r\n") if line]
        length = 0
        kept = []
        for line in headers:
            name = line.split(":", 1)[0].strip().lower()
            if name == "content-length":
                length = int(line.split(":", 1)[1].strip() or 0)
            if name in ("proxy-connection", "connection", "keep-alive", "proxy-authorization"):
                continue
            kept.append(line)
        body = await reader.readexactly(length) if length else b""
        path = parts.path or "/"
        if parts.query:
            path += f"?{parts.query}"
        upstream_head = f"{method} {path} {version}\r\n" + "".join(f"{line}\r\n" for line in kept)
        upstream_head += "Connection: close\r\n\r\n"
        host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        if not await self._upstream_allowed(parts.hostname, parts.port or 80):
            await self._refuse(host, writer)
            return False
        counters = self.counters
        counters.requests += 1
        counters.by_host[host] += 1
        counters.urls.append(target)
        del counters.urls[:-RECENT_URLS]
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(parts.hostname, parts.port or 80,
                                                                             local_addr=self.local_addr)
        except OSError as error:
            message = f"proxy could not reach {host}: {error}".encode()
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: "
                         + str(len(message)).encode() + b"\r\n\r\n" + message)
            await writer.drain()
            return False
        sent = upstream_head.encode("latin-1") + body
        counters.bytes_to_upstream += len(sent)
        upstream_writer.write(sent)
        await upstream_writer.drain()
        relayed = await self._pipe(upstream_reader, writer)
        counters.bytes_to_client += relayed
        counters.bytes_by_host[host] += relayed + len(sent)
        upstream_writer.close()
        return False  # the upstream closed after its response: so does this connection

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, target: asyncio.StreamWriter,
                    watch: Callable[[bytes], None] | None = None) -> int:
        total = 0
        while chunk := await source.read(65536):
            total += len(chunk)
            if watch is not None:
                watch(chunk)
            target.write(chunk)
            await target.drain()
        return total

    def _plain_http_watcher(self, target: str) -> Callable[[bytes], None]:
        """Record the URLs of plain-HTTP requests sent through a tunnel (Playwright's ``route.fetch``
        tunnels http:// too); a TLS tunnel (first byte 0x16) is counted by host only."""
        state = {"tls": None}

        def watch(chunk: bytes) -> None:
            if state["tls"] is None:
                state["tls"] = chunk[:1] == b"\x16"
            if state["tls"]:
                return
            for match in _REQUEST_LINE.finditer(chunk):
                self.counters.urls.append(f"http://{target}{match.group(1).decode('latin-1')}")
            del self.counters.urls[:-RECENT_URLS]

        return watch

    async def _tunnel(self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, _, port = target.rpartition(":")
        host = host.strip("[]")
        if not port.isdigit() or not await self._upstream_allowed(host, int(port)):
            await self._refuse(target, writer)
            return
        self.counters.requests += 1
        self.counters.by_host[target] += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port or 443),
                                                                             local_addr=self.local_addr)
        except (OSError, ValueError):
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await writer.drain()
        up, down = await asyncio.gather(self._pipe(reader, upstream_writer, self._plain_http_watcher(target)),
                                        self._pipe(upstream_reader, writer),
                                        return_exceptions=True)
        for amount, name in ((up, "bytes_to_upstream"), (down, "bytes_to_client")):
            if isinstance(amount, int):
                setattr(self.counters, name, getattr(self.counters, name) + amount)
                self.counters.bytes_by_host[target] += amount
        upstream_writer.close()

    async def _own(self, method: str, target: str, writer: asyncio.StreamWriter) -> bool:
        if target.startswith("/_proxy/reset") and method == "POST":
            self.counters.reset()
        body = json.dumps(self.counters.as_dict()).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        return True
