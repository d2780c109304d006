"""One response classifier for every way a page is fetched (httpx and Chromium alike).

A response's status, headers and content type become one :data:`Outcome` (what the page's counter
says) and one :class:`Verdict` (what the worker does about it): the HTTP fetcher and the browser page
loader both call :meth:`ResponseClassifier.classify`, and the failure policy reads
:meth:`ResponseClassifier.verdict`, so a 429 or a 403 means the same thing whatever rendered it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Literal

Outcome = Literal[
    "ok", "not_modified", "http_error", "timeout", "blocked", "connection_error", "too_many_redirects",
    "parse_error",
    "refused",  # a scheme or an address the crawl must not reach (scraping.fetching.addresses): never retried
    "decode_error",  # a body we will not or cannot decode (stacked or corrupt encoding, no memory): never retried
    "robots_disallowed",  # robots.txt forbids the URL to our User-Agent: never retried
    "robots_unavailable",  # robots.txt answered 429/5xx or nothing, no good copy kept (RFC 9309): retried later
    "host_rate_wait",  # the host's per-host rate gave no request slot in time: retried later
    "host_unreachable",  # refused, DNS failing, connect or first-byte timeout: retried, the host's breaker counts it
    "skipped",  # not fetched: the task's lease was lost before its request could start (never fetched unadmitted)
    "proxy_error",  # every proxy of the country's pool failed the connection (the proxies', not the site's, failure)
]
HTML_TYPES = ("text/html", "application/xhtml+xml", "application/xml", "text/xml", "text/plain")
# What a content: json source accepts; any type with a +json suffix too (application/vnd.api+json).
JSON_TYPES = ("application/json", "text/json", "application/ld+json", "text/plain", "text/javascript",
              "application/javascript")
BLOCKED_STATUSES = frozenset({403, 451})
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524})
RATE_LIMIT_STATUSES = frozenset({429, 503})
TRANSIENT_OUTCOMES = frozenset({"timeout", "connection_error", "host_unreachable", "host_rate_wait",
                                "robots_unavailable", "proxy_error"})


class Verdict(StrEnum):
    """What a fetch's outcome asks of the worker."""

    OK = "ok"  # extract, store or follow
    NOT_MODIFIED = "not_modified"  # release, write nothing
    BLOCKED = "blocked"  # retry later with backoff: a block may lift
    RATE_LIMITED = "rate_limited"  # pause the source and host for Retry-After, then retry
    RETRYABLE = "retryable"  # retry with backoff (timeouts, dead hosts, 5xx)
    PERMANENT = "permanent"  # dead letter at once: retrying cannot help (404, not HTML, redirect loop)


RETRY_VERDICTS = frozenset({Verdict.BLOCKED, Verdict.RATE_LIMITED, Verdict.RETRYABLE})


@dataclass(frozen=True, slots=True)
class Classification:
    """A response's outcome, the reason a failure carries, and the server's Retry-After in seconds."""

    outcome: Outcome
    reason: str = ""
    retry_after: float | None = None


MAX_RETRY_AFTER_DIGITS = 9  # about 31 years: anything longer is not a delay a server means
MAX_PARSED_RETRY_AFTER_SECONDS = 366 * 86_400.0  # a value further out is refused as absurd, not clamped


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now: either delta-seconds or an HTTP date.

    None when absent or not believable: a value of more than nine digits (``99999999999``, a 400-digit
    number that would parse to infinity), a date more than a year away, or anything non-finite. The
    caller then uses its default wait; the pause a believable value asks for is clamped separately
    (:meth:`harvester.workers.failures.FailurePolicy.decide`).
    """
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        if len(value.lstrip("0")) > MAX_RETRY_AFTER_DIGITS:
            return None
        seconds = float(int(value))
    else:
        try:
            moment = parsedate_to_datetime(value)
            seconds = max(0.0, moment.timestamp() - (time.time() if now is None else now))
        except (TypeError, ValueError, OverflowError, IndexError):
            return None
    if not math.isfinite(seconds) or seconds > MAX_PARSED_RETRY_AFTER_SECONDS:
        return None
    return seconds


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by case-insensitive name: httpx's headers are, Playwright's dict is lower-cased, a plain
    dict may be neither."""
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    return next((item for key, item in headers.items() if key.lower() == lowered), None)


class ResponseClassifier:
    """Status, headers and content type → :class:`Classification`; outcome and status → :class:`Verdict`.

    The status sets are constructor arguments so a test (or a later setting) can change them in one
    place; the defaults are what Harvester has always done.
    """

    def __init__(self, *, blocked_statuses: frozenset[int] = BLOCKED_STATUSES,
                 retryable_statuses: frozenset[int] = RETRYABLE_STATUSES,
                 rate_limit_statuses: frozenset[int] = RATE_LIMIT_STATUSES,
                 html_types: tuple[str, ...] = HTML_TYPES) -> None:
        self.blocked_statuses = blocked_statuses
        self.retryable_statuses = retryable_statuses
        self.rate_limit_statuses = rate_limit_statuses
        self.html_types = html_types

    def classify(self, status: int, headers: Mapping[str, str], content_type: str | None,
                 content: str = "html") -> Classification:
        """Classify a response that arrived. ``content_type`` None means the body is a rendered DOM
        (always HTML, whatever the server sent), so no content-type check applies; ``content`` is what
        the source reads (``html``, or ``json`` for JSON responses)."""
        if status == 304:
            return Classification("not_modified")
        if status in self.blocked_statuses:
            return Classification("blocked", f"HTTP {status}: the site refused us",
                                  parse_retry_after(header(headers, "retry-after")))
        if status >= 400:
            return Classification("http_error", f"HTTP {status}", parse_retry_after(header(headers, "retry-after")))
        if content_type is not None:
            media_type = content_type.split(";", 1)[0].strip().lower()
            if content == "json":
                if media_type and media_type not in JSON_TYPES and not media_type.endswith("+json"):
                    return Classification("parse_error", f"not a JSON response: content type {media_type}")
            elif media_type and media_type not in self.html_types:
                return Classification("parse_error", f"not an HTML page: content type {media_type}")
        return Classification("ok")

    def verdict(self, outcome: str, status: int | None = None, retry_after: float | None = None) -> Verdict:
        """What the worker does with a fetch that ended with ``outcome`` (and ``status``, ``retry_after``)."""
        if outcome == "ok":
            return Verdict.OK
        if outcome == "not_modified":
            return Verdict.NOT_MODIFIED
        if outcome == "blocked":  # a block that names a Retry-After is the site asking us to wait
            return Verdict.RATE_LIMITED if retry_after else Verdict.BLOCKED
        if outcome in TRANSIENT_OUTCOMES:
            return Verdict.RETRYABLE
        if outcome == "http_error" and status in self.retryable_statuses:
            return Verdict.RATE_LIMITED if status in self.rate_limit_statuses else Verdict.RETRYABLE
        return Verdict.PERMANENT


DEFAULT_CLASSIFIER = ResponseClassifier()
