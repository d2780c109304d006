"""Async HTTP fetching with httpx: keep-alive (HTTP/2 where the site offers it over TLS), a total
per-request deadline, a body-size cap and a redirect cap, and one outcome per page.

One :class:`Fetcher` is kept per worker process and reused across batches, so connections to a site
stay open between Celery messages (like Scrapy's downloader, and unlike a client per task).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Literal

import httpx

from harvester.config.model import SourceConfig
from harvester.settings import HarvesterSettings

Outcome = Literal[
    "ok", "not_modified", "http_error", "timeout", "blocked", "connection_error", "too_many_redirects",
    "parse_error",
]
HTML_TYPES = ("text/html", "application/xhtml+xml", "application/xml", "text/xml", "text/plain")
BLOCKED_STATUSES = frozenset({403, 451})
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524})
DEFAULT_HEADERS = {
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Language": "en-US,en;q=0.9",
    "Upgrade-Insecure-Requests": "1",
}


@dataclass(slots=True)
class FetchResult:
    """What one request produced; ``outcome`` drives storage, retry or dead letter."""

    url: str
    outcome: Outcome
    final_url: str = ""
    status: int | None = None
    text: str = ""
    content_type: str = ""
    truncated: bool = False
    size: int = 0
    retry_after: float | None = None
    reason: str = ""
    elapsed: float = 0.0
    blocked_requests: int = 0  # browser renders: requests aborted by resource-type blocking
    http_version: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def retryable(self) -> bool:
        """Worth another attempt later: the site may recover (timeouts, 5xx, 429, blocks, dead hosts)."""
        if self.outcome in ("timeout", "connection_error", "blocked"):
            return True
        return self.outcome == "http_error" and self.status in RETRYABLE_STATUSES

    @property
    def counter(self) -> str:
        """The per-source outcome counter this result increments (http errors carry their status)."""
        return f"http_{self.status}" if self.outcome == "http_error" else self.outcome


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now: either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))


def request_headers(source: SourceConfig, settings: HarvesterSettings) -> dict[str, str]:
    """Realistic browser-like headers, overridden by the source's own."""
    return {"User-Agent": settings.user_agent, **DEFAULT_HEADERS, **source.headers}


class Fetcher:
    """A pooled httpx client with Harvester's limits. Use as ``async with Fetcher(settings) as fetcher``."""

    def __init__(self, settings: HarvesterSettings, max_connections: int = 100) -> None:
        self.settings = settings
        self.client = httpx.AsyncClient(
            http2=True,
            follow_redirects=True,
            max_redirects=settings.max_redirects,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                                keepalive_expiry=60),
            timeout=httpx.Timeout(30.0),
            headers={"User-Agent": settings.user_agent},
        )

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()

    async def fetch(self, url: str, source: SourceConfig) -> FetchResult:
        """Fetch one page; never raises for what a site can do wrong (that becomes the outcome)."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(source.timeout):
                result = await self._fetch(url, source)
        except TimeoutError:
            result = FetchResult(url, "timeout", reason=f"no complete response within {source.timeout:g}s")
        except httpx.TooManyRedirects:
            result = FetchResult(url, "too_many_redirects",
                                 reason=f"more than {self.settings.max_redirects} redirects (a loop?)")
        except httpx.TimeoutException as error:
            result = FetchResult(url, "timeout", reason=f"{type(error).__name__}: {error}")
        except (httpx.TransportError, OSError) as error:
            result = FetchResult(url, "connection_error", reason=f"{type(error).__name__}: {error}")
        except httpx.InvalidURL as error:
            result = FetchResult(url, "parse_error", reason=f"invalid URL: {error}")
        result.elapsed = time.monotonic() - started
        return result

    async def _fetch(self, url: str, source: SourceConfig) -> FetchResult:
        cap = self.settings.body_size_cap_bytes
        headers = request_headers(source, self.settings)
        async with self.client.stream("GET", url, headers=headers) as response:
            status = response.status_code
            content_type = response.headers.get("content-type", "")
            result = FetchResult(url, "ok", final_url=str(response.url), status=status,
                                 content_type=content_type, http_version=response.http_version)
            if status == 304:
                result.outcome = "not_modified"
                return result
            if status in BLOCKED_STATUSES:
                result.outcome, result.reason = "blocked", f"HTTP {status}: the site refused us"
                result.retry_after = parse_retry_after(response.headers.get("retry-after"))
                return result
            if status >= 400:
                result.outcome, result.reason = "http_error", f"HTTP {status}"
                result.retry_after = parse_retry_after(response.headers.get("retry-after"))
                return result
            media_type = content_type.split(";", 1)[0].strip().lower()
            if media_type and media_type not in HTML_TYPES:
                result.outcome, result.reason = "parse_error", f"not an HTML page: content type {media_type}"
                return result
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                if size + len(chunk) > cap:
                    chunks.append(chunk[: cap - size])
                    size = cap
                    result.truncated = True
                    break
                chunks.append(chunk)
                size += len(chunk)
            body = b"".join(chunks)
            result.size = size
            encoding = response.charset_encoding or "utf-8"
            try:
                result.text = body.decode(encoding, errors="replace")
            except LookupError:
                result.text = body.decode("utf-8", errors="replace")
            if result.truncated:
                result.reason = f"body cut at {cap} bytes"
            return result
