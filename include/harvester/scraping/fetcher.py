"""Async HTTP fetching with httpx: keep-alive (HTTP/2 where the site offers it over TLS), a total
per-request deadline, a body-size cap and a redirect cap, and one outcome per page.

One :class:`Fetcher` is kept per worker process and reused across batches, so connections to a site
stay open between Celery messages (like Scrapy's downloader, and unlike a client per task).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import httpx

from harvester.config.model import SourceConfig
from harvester.scraping.page_fetcher import FetchedBatch, FetchResult
from harvester.scraping.responses import (
    BLOCKED_STATUSES,
    DEFAULT_CLASSIFIER,
    HTML_TYPES,
    RETRYABLE_STATUSES,
    Outcome,
    ResponseClassifier,
    parse_retry_after,
)
from harvester.settings import HarvesterSettings

__all__ = ["BLOCKED_STATUSES", "DEFAULT_HEADERS", "HTML_TYPES", "RETRYABLE_STATUSES", "FetchResult", "Fetcher",
           "Outcome", "parse_retry_after", "request_headers"]

DEFAULT_HEADERS = {
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Language": "en-US,en;q=0.9",
    "Upgrade-Insecure-Requests": "1",
}


def request_headers(source: SourceConfig, settings: HarvesterSettings) -> dict[str, str]:
    """Realistic browser-like headers, overridden by the source's own."""
    return {"User-Agent": settings.user_agent, **DEFAULT_HEADERS, **source.headers}


class Fetcher:
    """A pooled httpx client with Harvester's limits. Use as ``async with Fetcher(settings) as fetcher``.

    Meets the :class:`~harvester.scraping.page_fetcher.PageFetcher` contract: a batch's pages are
    fetched concurrently, each within ``source.timeout``.
    """

    def __init__(self, settings: HarvesterSettings, max_connections: int = 100,
                 classifier: ResponseClassifier = DEFAULT_CLASSIFIER) -> None:
        self.settings = settings
        self.classifier = classifier
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

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> Fetcher:
        return cls(settings)

    def fetch_seconds(self, source: SourceConfig, pages: int) -> float:
        """Pages are fetched concurrently and each ends by ``source.timeout``."""
        return source.timeout

    async def fetch_all(self, urls: Sequence[str], source: SourceConfig) -> FetchedBatch:
        return FetchedBatch(list(await asyncio.gather(*(self.fetch(url, source) for url in urls))))

    async def fetch(self, url: str, source: SourceConfig) -> FetchResult:
        """Fetch one page; never raises for what a site can do wrong (that becomes the outcome)."""
        started = time.monotonic()
        started_at = time.time()
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
        result.started_at = started_at
        return result

    async def _fetch(self, url: str, source: SourceConfig) -> FetchResult:
        cap = self.settings.body_size_cap_bytes
        headers = request_headers(source, self.settings)
        async with self.client.stream("GET", url, headers=headers) as response:
            status = response.status_code
            content_type = response.headers.get("content-type", "")
            result = FetchResult(url, "ok", final_url=str(response.url), status=status,
                                 content_type=content_type, http_version=response.http_version)
            classified = self.classifier.classify(status, response.headers, content_type)
            if classified.outcome != "ok":
                result.outcome, result.reason = classified.outcome, classified.reason
                result.retry_after = classified.retry_after
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
