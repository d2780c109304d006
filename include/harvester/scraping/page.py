"""What one fetched page yields: a typed record (detail pages), or links and records of its items
(listing pages).

Shared by the Celery task and `harvester try`, so the feedback loop shows exactly what a harvest does.
"""

from __future__ import annotations

from dataclasses import dataclass

from harvester.config import HttpRequest, SourceConfig, request_key
from harvester.scraping.discovery import Discovery, add_next_request, canonicalise_url, discover_links
from harvester.scraping.extraction import (
    DataBounds,
    Extraction,
    ListingRecords,
    PageData,
    StructuredDataError,
    extract_listing_records,
    extract_record,
    markup_refusal,
)
from harvester.scraping.fetching import FetchResult, strip_userinfo
from harvester.settings import HarvesterSettings, get_settings


@dataclass
class PageResult:
    """The fetch, and what came out of it (extraction for details; discovery and records for listings)."""

    fetch: FetchResult
    kind: str
    url: str
    extraction: Extraction | None = None
    discovery: Discovery | None = None
    listing_records: ListingRecords | None = None

    @property
    def records(self) -> list[dict]:
        """The records this page gives: its own (a detail page) or its items' (a listing page)."""
        if self.extraction is not None:
            return [self.extraction.record] if self.extraction.record is not None else []
        return self.listing_records.records if self.listing_records is not None else []

    @property
    def rejected_reason(self) -> str | None:
        return self.extraction.rejected_reason if self.extraction is not None else None


def record_url(url: str) -> str:
    """The URL a record is stored under: the canonical form of the requested URL, without credentials."""
    url = strip_userinfo(url)
    return canonicalise_url(url) or url


def page_data(source: SourceConfig, fetch: FetchResult, url: str, bounds: DataBounds | None = None) -> PageData:
    """The fetched page as the selectors read it (parsed on first use, once)."""
    return PageData(fetch.text, fetch.final_url or url, source.content, bounds or DataBounds.from_settings())


def process_page(source: SourceConfig, kind: str, url: str, depth: int, fetch: FetchResult, *,
                 trace: bool = False, settings: HarvesterSettings | None = None,
                 request: HttpRequest | None = None) -> PageResult:
    """Extract from a successful fetch; a failed fetch passes through untouched. A ``content: json``
    response that is not JSON (or nests too deep), or HTML refused before parsing (:mod:`markup`), fails the
    fetch as ``parse_error``: retrying cannot help. ``settings``: the caller's (the worker's; the process's by
    default, for the tools): the markup caps, URL lengths, structured-data bounds and the value and page budgets
    are all read from them. ``request``: the method and body ``url`` was asked with (an API's POST): the page is
    known by its key (:func:`harvester.config.request_key`), and ``listing.next`` builds the next one from it."""
    result = PageResult(fetch, kind, record_url(url) if request is None else request_key(strip_userinfo(url), request))
    if not fetch.ok:
        return result
    limits = settings if settings is not None else get_settings()
    if kind == "sitemap":  # the pages and sitemaps it lists (issue 23)
        from harvester.scraping.discovery import sitemap_discovery

        result.discovery = sitemap_discovery(source, fetch, limits.max_url_length)
        return result
    base = fetch.final_url or url
    data = page_data(source, fetch, url, DataBounds.from_settings(limits))
    if source.content == "html" and (refusal := markup_refusal(
            fetch.text, limits.max_attributes_per_element, limits.max_elements_per_page)) is not None:
        fetch.outcome, fetch.reason = "parse_error", refusal
        return result
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
    else:
        result.extraction = extract_record(source, data, result.url, base, trace=trace,
                                           max_value_length=limits.max_value_length,
                                           max_page_characters=limits.max_extracted_characters)
    return result
