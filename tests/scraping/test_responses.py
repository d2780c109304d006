"""The one response classifier: the same status and headers mean the same outcome and verdict,
whether httpx fetched the page or Chromium rendered it."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from harvester.pageslots.host import BrowserHost
from harvester.scraping.fetching.fetcher import Fetcher, FetchResult
from harvester.scraping.fetching.responses import ResponseClassifier, Verdict
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source

classifier = ResponseClassifier()


def http_headers(**values: str) -> httpx.Headers:
    """Headers as the httpx fetcher sees them (case-insensitive, canonical names)."""
    return httpx.Headers({name.replace("_", "-").title(): value for name, value in values.items()})


def browser_headers(**values: str) -> dict[str, str]:
    """Headers as Playwright's ``response.headers`` gives them: a plain dict, names lower-cased."""
    return {name.replace("_", "-"): value for name, value in values.items()}


@pytest.mark.unit
@pytest.mark.parametrize("headers", [http_headers, browser_headers], ids=["httpx", "playwright"])
@pytest.mark.parametrize(("status", "outcome", "reason", "retry_after", "verdict"), [
    (200, "ok", "", None, Verdict.OK),
    (304, "not_modified", "", None, Verdict.NOT_MODIFIED),
    (403, "blocked", "HTTP 403: the site refused us", None, Verdict.BLOCKED),
    (451, "blocked", "HTTP 451: the site refused us", 60.0, Verdict.RATE_LIMITED),
    (404, "http_error", "HTTP 404", None, Verdict.PERMANENT),
    (410, "http_error", "HTTP 410", None, Verdict.PERMANENT),
    (408, "http_error", "HTTP 408", None, Verdict.RETRYABLE),
    (500, "http_error", "HTTP 500", None, Verdict.RETRYABLE),
    (502, "http_error", "HTTP 502", 5.0, Verdict.RETRYABLE),
    (429, "http_error", "HTTP 429", 7.0, Verdict.RATE_LIMITED),
    (429, "http_error", "HTTP 429", None, Verdict.RATE_LIMITED),  # no Retry-After: the policy's default
    (503, "http_error", "HTTP 503", 120.0, Verdict.RATE_LIMITED),
])
def test_status_and_headers_classify_alike_for_httpx_and_playwright(headers, status, outcome, reason, retry_after,
                                                                    verdict) -> None:
    given = headers(retry_after=str(int(retry_after))) if retry_after is not None else headers()
    for content_type in ("text/html; charset=utf-8", None):  # None: a rendered DOM
        classified = classifier.classify(status, given, content_type)
        assert (classified.outcome, classified.reason, classified.retry_after) == (outcome, reason, retry_after)
        assert classifier.verdict(classified.outcome, status, classified.retry_after) is verdict


@pytest.mark.unit
def test_content_type_is_checked_only_when_the_body_is_the_servers() -> None:
    assert classifier.classify(200, {}, "application/json").outcome == "parse_error"
    assert classifier.classify(200, {}, "application/json").reason == "not an HTML page: content type application/json"
    assert classifier.classify(200, {}, "text/plain").outcome == "ok"
    assert classifier.classify(200, {}, "").outcome == "ok"  # no content type: try to parse it
    assert classifier.classify(200, {}, None).outcome == "ok"  # Chromium's DOM is HTML whatever came


@pytest.mark.unit
def test_retry_after_as_an_http_date_and_in_any_header_case() -> None:
    classified = classifier.classify(429, {"RETRY-AFTER": "Wed, 21 Oct 2015 07:28:00 GMT"}, None)
    assert classified.retry_after == 0.0  # a date in the past: retry now
    assert classifier.classify(429, {"Retry-After": "soon"}, None).retry_after is None


@pytest.mark.unit
@pytest.mark.parametrize(("outcome", "verdict"), [
    ("timeout", Verdict.RETRYABLE), ("connection_error", Verdict.RETRYABLE),
    ("too_many_redirects", Verdict.PERMANENT), ("parse_error", Verdict.PERMANENT),
])
def test_fetches_that_got_no_response_have_verdicts_too(outcome, verdict) -> None:
    result = FetchResult("http://x.example/", outcome)
    assert result.verdict is verdict and result.retryable is (verdict is Verdict.RETRYABLE)


@pytest.mark.unit
def test_the_status_sets_are_the_classifiers_to_change() -> None:
    strict = ResponseClassifier(blocked_statuses=frozenset({403, 404}), rate_limit_statuses=frozenset({429}))
    assert strict.classify(404, {}, None).outcome == "blocked"
    assert strict.verdict("http_error", 503) is Verdict.RETRYABLE  # 503 no longer pauses the source


@pytest.mark.integration
def test_httpx_and_chromium_give_the_same_outcome_for_the_same_response(demo_site) -> None:
    """The demo site answers each path once through httpx and once through the page slot's Chromium."""
    paths = ["/product/1", "/status/404", "/status/500", "/blocked", "/ratelimited/{via}?retry_after=7"]
    source = demo_source(demo_site.url, timeout=10)
    settings = HarvesterSettings(page_slot_retry_delay_seconds=0.05)

    async def both() -> tuple[list[FetchResult], list[FetchResult]]:
        async with Fetcher(settings) as fetcher, BrowserHost(settings) as host:
            http = (await fetcher.fetch_all([demo_site.url + path.format(via="http") for path in paths], source))
            browser = [await host.render(demo_site.url + path.format(via="browser"), source) for path in paths]
            return http.results, browser

    http, browser = asyncio.run(both())
    for path, by_http, by_browser in zip(paths, http, browser, strict=True):
        seen_http = (by_http.outcome, by_http.status, by_http.retry_after, by_http.verdict, by_http.reason)
        seen_browser = (by_browser.outcome, by_browser.status, by_browser.retry_after, by_browser.verdict,
                        by_browser.reason)
        assert seen_http == seen_browser, path
    assert [result.verdict for result in http] == [Verdict.OK, Verdict.PERMANENT, Verdict.RETRYABLE, Verdict.BLOCKED,
                                                   Verdict.RATE_LIMITED]
