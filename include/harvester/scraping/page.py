"""What one fetched page yields: a typed record (detail pages), or links and records of its items
(listing pages).

Shared by the Celery task and `harvester try`, so the feedback loop shows exactly what a harvest does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from harvester.config import HttpRequest, SourceConfig, request_key
from harvester.scraping.discovery import Discovery, add_next_request, canonicalise_url, discover_links
from harvester.scraping.extraction import (
    BlockDetector,
    DataBounds,
    Extraction,
    ListingRecords,
    PageData,
    StructuredDataError,
    extract_listing_records,
    extract_record,
    markup_refusal,
    recognise_block,
)
from harvester.scraping.fetching import FetchResult, same_site, strip_userinfo
from harvester.scraping.lifecycle import gone_by_markers, gone_by_status, redirect_leaves_item
from harvester.settings import HarvesterSettings, get_settings

log = logging.getLogger(__name__)


@dataclass
class PageResult:
    """The fetch, and what came out of it (extraction for details; discovery and records for listings)."""

    fetch: FetchResult
    kind: str
    url: str
    extraction: Extraction | None = None
    discovery: Discovery | None = None
    listing_records: ListingRecords | None = None
    gone: str | None = None  # why the item is gone (a detail page: 404/410, a soft 404, a redirect away)
    requested_url: str | None = None  # a redirect that stayed on the item: the URL asked for (``url`` is the final)

    @property
    def records(self) -> list[dict]:
        """The records this page gives: its own (a detail page) or its items' (a listing page)."""
        if self.extraction is not None:
            return [self.extraction.record] if self.extraction.record is not None else []
        return self.listing_records.records if self.listing_records is not None else []

    @property
    def rejected_reason(self) -> str | None:
        return self.extraction.rejected_reason if self.extraction is not None else None


def record_url(url: str, source: SourceConfig | None = None) -> str:
    """The URL a record is stored under: the canonical form of the requested URL (without the source's
    session ids), without credentials."""
    url = strip_userinfo(url)
    if source is None:
        return canonicalise_url(url) or url
    return canonicalise_url(url, session_ids=source.session_ids.rules) or url


def canonical_link_url(source: SourceConfig, data: PageData, base: str, requested: str) -> str:
    """The page's ``<link rel=canonical>`` in its canonical form (without the source's session ids) when the
    source keys records by it and it names a page of the same site as the requested URL; else ``requested``.
    Another site's canonical link is not trusted: a page must not file its record under a key it does not
    own."""
    if source.url_key != "canonical_link" or source.content != "html":
        return requested
    href = data.selector.css("link[rel~=canonical]::attr(href)").get()
    canonical = canonicalise_url(href, base, source.session_ids.rules) if href else None
    return canonical if canonical is not None and same_site(canonical, requested) else requested


def page_data(source: SourceConfig, fetch: FetchResult, url: str, bounds: DataBounds | None = None) -> PageData:
    """The fetched page as the selectors read it (parsed on first use, once)."""
    return PageData(fetch.text, fetch.final_url or url, source.content, bounds or DataBounds.from_settings())


def item_on_page(source: SourceConfig, fetch: FetchResult, data: PageData, result: PageResult) -> bool:
    """Whether a detail page shows its item; if not, ``result.gone`` says why. A redirect that stays on the
    item moves ``result.url`` to the final canonical URL and keeps the requested one in ``requested_url``."""
    final = record_url(fetch.final_url, source) if fetch.final_url else result.url
    if final != result.url:
        if (left := redirect_leaves_item(source, result.url, final)) is not None:
            result.gone = left
            return False
        result.requested_url, result.url = result.url, final
    result.gone = gone_by_markers(source, data)
    return result.gone is None


def mark_block(source: SourceConfig, fetch: FetchResult, settings: HarvesterSettings,
               data: PageData | None = None) -> bool:
    """Make ``fetch`` ``blocked`` when its page (or status) is a block by the source's markers, the built-in
    ones or the shared ``block_markers``: True then. ``data``: the page as extraction parses it, so a selector
    marker costs no second parse."""
    detector = BlockDetector.for_source(source, settings.block_markers)
    block = recognise_block(detector, fetch.outcome, fetch.status, fetch.text,
                            (lambda: data.selector) if data is not None else None)
    if block is None:
        return False
    fetch.outcome, fetch.reason = block
    return True


def process_page(source: SourceConfig, kind: str, url: str, depth: int, fetch: FetchResult, *,
                 trace: bool = False, settings: HarvesterSettings | None = None,
                 request: HttpRequest | None = None) -> PageResult:
    """:func:`extract_page`, and a page whose body breaks a parser or an extractor becomes that page's
    ``parse_error``: the pages of its batch are stored, released and counted as if it were not there."""
    try:
        return extract_page(source, kind, url, depth, fetch, trace=trace, settings=settings, request=request)
    except Exception as error:  # what one site sent broke our reading of it: that page fails, never its batch
        log.warning("processing %s failed: %s: %s", url, type(error).__name__, error, exc_info=True)
        fetch.outcome, fetch.reason = "parse_error", f"unreadable page: {type(error).__name__}: {error}"[:300]
        return PageResult(fetch, kind, url)


def extract_page(source: SourceConfig, kind: str, url: str, depth: int, fetch: FetchResult, *,
                 trace: bool = False, settings: HarvesterSettings | None = None,
                 request: HttpRequest | None = None) -> PageResult:
    """Extract from a successful fetch; a failed fetch passes through untouched. A ``content: json``
    response that is not JSON (or nests too deep), or HTML refused before parsing (:mod:`markup`), fails the
    fetch as ``parse_error``: retrying cannot help. ``settings``: the caller's (the worker's; the process's by
    default, for the tools): the markup caps, URL lengths, structured-data bounds and the value and page budgets
    are all read from them. ``request``: the method and body ``url`` was asked with (an API's POST): the page is
    known by its key (:func:`harvester.config.request_key`), and ``listing.next`` builds the next one from it."""
    result = PageResult(fetch, kind, record_url(url, source) if request is None
                        else request_key(strip_userinfo(url), request))
    limits = settings if settings is not None else get_settings()
    if kind == "details" and (gone := gone_by_status(source, fetch)) is not None:
        result.gone = gone
        return result
    if not fetch.ok:
        if kind != "sitemap":
            mark_block(source, fetch, limits)
        return result
    if kind == "sitemap":  # the pages and sitemaps it lists
        from harvester.scraping.discovery import sitemap_discovery

        result.discovery = sitemap_discovery(source, fetch, limits.max_url_length)
        return result
    base = fetch.final_url or url
    data = page_data(source, fetch, url, DataBounds.from_settings(limits))
    if source.content == "html" and (refusal := markup_refusal(
            fetch.text, limits.max_attributes_per_element, limits.max_elements_per_page)) is not None:
        fetch.outcome, fetch.reason = "parse_error", refusal
        return result
    if mark_block(source, fetch, limits, data if source.content == "html" else None):
        return result  # a challenge page is never extracted, so never stored
    if source.content == "json":
        try:
            data.json  # noqa: B018 (parsed here, so a body that is not JSON fails the page, not each attribute)
        except StructuredDataError as error:
            fetch.outcome, fetch.reason = "parse_error", error.detail
            return result
    if kind == "listing":
        result.discovery = discover_links(source, base, data, depth, limits.max_url_length,
                                          limits.max_next_pages_per_page)
        if source.listing is not None and source.listing.records is not None:
            result.listing_records = extract_listing_records(source, data, result.url, base, trace=trace,
                                                             max_value_length=limits.max_value_length,
                                                             max_page_characters=limits.max_extracted_characters)
        if source.listing is not None and source.listing.next is not None and (
                result.listing_records is None or result.listing_records.items):  # no records: the last page
            add_next_request(source, strip_userinfo(url), request, data, depth, result.discovery)
    elif request is None and not item_on_page(source, fetch, data, result):  # a POST's page is known by its key
        return result
    else:
        result.url = canonical_link_url(source, data, base, result.url)
        result.extraction = extract_record(source, data, result.url, base, trace=trace,
                                           max_value_length=limits.max_value_length,
                                           max_page_characters=limits.max_extracted_characters)
    return result
