"""What one fetched page yields: a typed record (detail pages) or links (listing pages).

Shared by the Celery task and `harvester try`, so the feedback loop shows exactly what a harvest does.
"""

from __future__ import annotations

from dataclasses import dataclass

from harvester.config.model import SourceConfig
from harvester.scraping.addresses import strip_userinfo
from harvester.scraping.extraction import Extraction, extract_record, parse_html
from harvester.scraping.fetcher import FetchResult
from harvester.scraping.links import Discovery, canonicalise_url, discover_links


@dataclass
class PageResult:
    """The fetch, and what came out of it (extraction for details, discovery for listings)."""

    fetch: FetchResult
    kind: str
    url: str
    extraction: Extraction | None = None
    discovery: Discovery | None = None

    @property
    def rejected_reason(self) -> str | None:
        return self.extraction.rejected_reason if self.extraction is not None else None


def record_url(url: str) -> str:
    """The URL a record is stored under: the canonical form of the requested URL, without credentials."""
    url = strip_userinfo(url)
    return canonicalise_url(url) or url


def process_page(source: SourceConfig, kind: str, url: str, depth: int, fetch: FetchResult) -> PageResult:
    """Extract from a successful fetch; a failed fetch passes through untouched."""
    result = PageResult(fetch, kind, record_url(url))
    if not fetch.ok:
        return result
    base = fetch.final_url or url
    selector = parse_html(fetch.text, base)
    if kind == "listing":
        result.discovery = discover_links(source, base, selector, depth)
    else:
        result.extraction = extract_record(source, selector, result.url, base)
    return result
