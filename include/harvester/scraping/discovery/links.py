"""Link discovery on listing pages. URLs take their one canonical form from :mod:`harvester.urls`, so the
duplicate-URL checker and the output's unique key both see the same spelling.

Links are length-capped before anything runs on them, and ``listing.follow`` runs on the linear-time
engine of :mod:`harvester.patterns`: no link a site writes can stall a worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import re2
from parsel import Selector

from harvester.config import JSON_PREFIX, HttpRequest, SourceConfig
from harvester.patterns import compile_pattern
from harvester.scraping.extraction import PageData, StructuredDataError, gather, search
from harvester.scraping.fetching import same_site
from harvester.urls import DEFAULT_SESSION_IDS, TRACKING_PARAMETERS, TRACKING_PREFIXES, SessionIds, canonicalise_url

__all__ = ["TRACKING_PARAMETERS", "TRACKING_PREFIXES", "Discovery", "canonicalise_url", "discover_links",
           "follow_matcher", "select_links"]


def follow_matcher(pattern: str) -> re2._Regexp:
    """The compiled ``listing.follow`` pattern (RE2, cached)."""
    return compile_pattern(pattern)


def _max_url_length() -> int:
    from harvester.settings import get_settings

    return get_settings().max_url_length


def _max_next_pages() -> int:
    from harvester.settings import get_settings

    return get_settings().max_next_pages_per_page


def next_page_followed(source: SourceConfig, page_url: str, url: str) -> bool:
    """A next listing page is followed when it matches ``listing.follow_pages``, or, without one, when it is
    on the same site as the page that links it (a next-page link must not walk the crawl to another site)."""
    listing = source.listing
    if listing is not None and listing.follow_pages is not None:
        return bool(follow_matcher(listing.follow_pages).search(url))
    return same_site(page_url, url)


def select_links(selector: Selector | PageData, expressions: list[str]) -> list[str]:
    """Raw link strings selected by CSS (or ``xpath:...``) expressions, elements giving their href, or by
    ``json:`` JMESPath expressions over a JSON page (strings, or objects' ``url``/``href``). No expression selects
    nothing without a document: a JSON API's page (``listing.next``, no link selectors) is never parsed as markup."""
    if not expressions:
        return []
    page = selector if isinstance(selector, PageData) else None
    if page is not None and any(expression.strip().startswith(JSON_PREFIX) for expression in expressions):
        return _json_links(page, expressions)
    selector = page.selector if page is not None else selector
    found: list[str] = []
    for expression in expressions:
        if expression.startswith("xpath:"):
            nodes = selector.xpath(expression[len("xpath:"):])
        else:
            nodes = selector.css(expression)
        for node in nodes:
            if isinstance(node.root, str):
                found.append(node.root)
            else:
                href = node.attrib.get("href")
                if href is not None:
                    found.append(href)
    return found


def _json_links(page: PageData, expressions: list[str]) -> list[str]:
    try:
        document = page.json
    except StructuredDataError:
        return []
    found: list[str] = []
    for expression in expressions:
        for value in gather([search(expression.strip()[len(JSON_PREFIX):].strip(), document)], first_only=False):
            if isinstance(value, dict):
                value = value.get("url", value.get("href"))
            if isinstance(value, str) and value.strip():
                found.append(value.strip())
    return found


@dataclass
class Discovery:
    """What a listing page leads to, before the duplicate-URL checker and the per-run cap."""

    details: list[str] = field(default_factory=list)
    listings: list[str] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)
    # next listing requests with a method and a body (listing.next): their key in ``listings`` -> (URL, request)
    requests: dict[str, tuple[str, HttpRequest | None]] = field(default_factory=dict)

    def listing_request(self, key: str) -> tuple[str, HttpRequest | None]:
        """The URL and request of a listing page this page leads to (a link's key is its URL)."""
        return self.requests.get(key, (key, None))

    def ignore(self, reason: str) -> None:
        self.ignored[reason] = self.ignored.get(reason, 0) + 1

    def usable_url(self, raw: str, base: str, limit: int, session_ids: SessionIds = DEFAULT_SESSION_IDS
                   ) -> str | None:
        """``raw``'s canonical form against ``base`` (without the source's session ids) when it is at most
        ``limit`` characters before and after it is canonicalised; else None, counted (too_long, not_http)."""
        url = canonicalise_url(raw, base, session_ids) if len(raw) <= limit else None
        if len(raw) > limit or (url is not None and len(url) > limit):
            self.ignore("too_long")
        elif url is None:
            self.ignore("not_http")
        else:
            return url
        return None

    def add_detail(self, url: str, follow: re2._Regexp | None, seen: set[str]) -> bool:
        """Keep ``url`` as a detail link unless the follow pattern refuses it or this page named it already
        (each counted); whether it was kept."""
        if follow is not None and not follow.search(url):
            self.ignore("not_followed")
        elif url in seen:
            self.ignore("repeated_on_page")
        else:
            seen.add(url)
            self.details.append(url)
            return True
        return False


def _usable_links(selector: Selector | PageData, expressions: list[str], page_url: str, limit: int,
                  discovery: Discovery, session_ids: SessionIds) -> Iterator[str]:
    """The canonical URLs the expressions select (:meth:`Discovery.usable_url`)."""
    for raw in select_links(selector, expressions):
        if (url := discovery.usable_url(raw, page_url, limit, session_ids)) is not None:
            yield url


def discover_links(source: SourceConfig, page_url: str, selector: Selector | PageData, depth: int,
                   max_url_length: int | None = None, max_next_pages: int | None = None) -> Discovery:
    """Detail links matching the follow pattern, and next listing pages while depth < max_depth that
    :func:`next_page_followed` accepts, at most ``max_next_pages`` of them (default: the setting).

    A link longer than ``max_url_length`` (default: the setting) is ignored before it is
    canonicalised or matched.
    """
    discovery = Discovery()
    listing = source.listing
    if listing is None:
        return discovery
    limit = max_url_length if max_url_length is not None else _max_url_length()
    follow = follow_matcher(listing.follow)
    seen: set[str] = set()
    session_ids = source.session_ids.rules
    for url in _usable_links(selector, listing.link_selectors, page_url, limit, discovery, session_ids):
        discovery.add_detail(url, follow, seen)
    if listing.next_page_selectors:
        next_cap = max_next_pages if max_next_pages is not None else _max_next_pages()
        for url in _usable_links(selector, listing.next_page_selectors, page_url, limit, discovery, session_ids):
            if depth + 1 > listing.max_depth:
                discovery.ignore("beyond_max_depth")
            elif not next_page_followed(source, page_url, url):
                discovery.ignore("not_followed")
            elif url not in seen and len(discovery.listings) >= next_cap:
                discovery.ignore("over_next_pages_per_page")
            elif url not in seen:
                seen.add(url)
                discovery.listings.append(url)
    return discovery
