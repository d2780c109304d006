"""The page-fetcher contract: what the HTTP fetcher and the browser host both offer the worker.

A batch has one flow whatever renders its pages: the worker asks a :class:`PageFetcher` for every
URL of the batch and gets one :class:`FetchResult` per URL, in order, plus the counters of the
fetching itself. The HTTP :class:`~harvester.scraping.fetching.fetcher.Fetcher` fetches concurrently on the
worker's loop; the browser adapter (:class:`harvester.pageslots.browser_host.BrowserPageFetcher`) renders
one page after the other in the process's page slot.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from harvester.config import SourceConfig
from harvester.errors import HostRateTimeout as HostRateTimeout  # its old home; tests import it here
from harvester.scraping.fetching.responses import DEFAULT_CLASSIFIER, RETRY_VERDICTS, Outcome, Verdict

# Awaited before the request of the page at this index of the batch starts: True to fetch, False when the
# task is no longer the worker's (its lease was lost). The worker's permit takes the source's per_minute
# token here, at fetch time, so the limit holds as the site sees it, not when Celery delivered the message.
FetchPermit = Callable[[int], Awaitable[bool]]
SKIPPED_REASON = "not fetched: the task's lease was lost before its request could start"


@dataclass(frozen=True, slots=True)
class HostLimits:
    """What one host allows a source at fetch time: request starts per rolling window
    (``per_host_per_minute``), a minimum gap between starts (robots.txt Crawl-delay / Request-rate),
    and requests in flight there (``per_host_max_active``; tasks in flight, ``max_active``, are the
    distributor's). Zero: no such limit."""

    per_minute: int = 0
    min_interval_seconds: float = 0.0
    max_in_flight: int = 0

    @property
    def limited(self) -> bool:
        return bool(self.per_minute or self.min_interval_seconds or self.max_in_flight)


NO_SECRET_HEADERS: frozenset[str] = frozenset()  # an exchange whose source has no credentials


@dataclass(slots=True)
class Exchange:
    """The request a page cost and the response it got, as sent and received, for a source whose responses
    are archived (``output.archive``): the worker writes them as WARC records. Only the last request of a
    redirect chain is kept (the one the page's text came from); the body is the decoded payload (what the page
    was read from), so its ``Content-Encoding`` no longer applies. Credentials are in ``request_headers`` as
    sent: the archive redacts them, never the fetcher, which knows nothing of storage.

    Not frozen: a frozen dataclass sets each of its eight fields through ``object.__setattr__``, about 1 µs of an
    archived page's CPU in the fetcher (measured 2026-12-07); nothing changes one after it is made."""

    method: str
    url: str
    request_headers: tuple[tuple[str, str], ...]
    status: int
    response_headers: tuple[tuple[str, str], ...]
    body: bytes = b""
    http_version: str = "HTTP/1.1"
    credential_header_names: frozenset[str] = NO_SECRET_HEADERS  # lower-cased: headers a connection's credentials added


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
    started_at: float = 0.0  # wall clock (s) when the request started, for the queue-latency histogram
    blocked_requests: int = 0  # browser renders: requests aborted by resource-type blocking
    http_version: str = ""
    etag: str = ""  # the response's validators, sent back on the next visit (conditional requests)
    last_modified: str = ""
    exchange: Exchange | None = None  # the request and response as they went, when the source archives them
    # a browser page's JSON responses (its XHR and fetch calls) the page's data came from, archived beside it
    data_exchanges: tuple[Exchange, ...] = ()
    session: str = ""  # the session it went out in (an exit of a proxy pool and a cookie jar); '' when direct
    tier: str = ""  # the source's proxy tier it went out on ('' for a source without proxy.tiers)
    transferred: int = 0  # bytes of the response as they came over the wire: its head and its (raw) body

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def verdict(self) -> Verdict:
        """What the worker does with this result, as the one response classifier decides."""
        return DEFAULT_CLASSIFIER.verdict(self.outcome, self.status, self.retry_after)

    @property
    def retryable(self) -> bool:
        """Worth another attempt later: the site may recover (timeouts, 5xx, 429, blocks, dead hosts)."""
        return self.verdict in RETRY_VERDICTS

    @property
    def counter(self) -> str:
        """The per-source outcome counter this result increments (http errors carry their status)."""
        return f"http_{self.status}" if self.outcome == "http_error" else self.outcome


@dataclass
class FetchedBatch:
    """One result per requested URL (same order), and counters of the fetching itself (a browser's
    blocked requests and transferred bytes) that the batch adds to the source's outcomes."""

    results: list[FetchResult]
    outcomes: Counter[str] = field(default_factory=Counter)

    @classmethod
    async def gathered(cls, pages: Iterable[Awaitable[FetchResult]]) -> FetchedBatch:
        """``pages`` fetched concurrently, their results in order. When one raises (the worker's own stores failing,
        never a site) the others are cancelled before it propagates: with ``gather`` alone they would go on running
        in the worker's loop into its next batch, fetching for a batch that failed."""
        tasks = [asyncio.ensure_future(page) for page in pages]
        try:
            return cls(list(await asyncio.gather(*tasks)))
        except BaseException:  # a failure or a cancellation alike: no page of the batch outlives it
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise


@runtime_checkable
class PageFetcher(Protocol):
    """Fetches the pages of one batch of one source. Never raises for what a site does wrong: that
    becomes each result's outcome."""

    def fetch_seconds(self, source: SourceConfig, pages: int) -> float:
        """The longest fetching ``pages`` pages may take: the batch's leases are vouched for that long
        (plus time to store)."""
        ...

    async def fetch_all(self, urls: Sequence[str], source: SourceConfig, permit: FetchPermit | None = None
                        ) -> FetchedBatch:
        """One :class:`FetchResult` per URL, in the order given. With ``permit``, each request starts only
        once ``permit(index)`` says so; a page it refuses is not fetched (outcome ``skipped``)."""
        ...

    async def aclose(self) -> None:
        """Release what the fetcher holds (connections, a browser)."""
        ...
