"""Whether a detail page still shows its item: gone (a 404 or 410, a soft 404, a redirect away), or the item.

Items go away: a shop delists a product, a board closes a job posting. Sites say so in several ways, and
each one, read as a product page, stores wrong data (a "Product not found" page extracted as a product, a
redirect to the home page stored under the item's URL) or turns a normal event into a failure (a 404 dead-
lettered). So before a detail page is extracted it is sorted here, with rules that hold on any site:

- a status the source's ``gone.statuses`` names (404 and 410 by default);
- a redirect that leaves the item: to the site's home page, to one of the source's listing pages (its seeds
  when it starts from listings), to an ancestor of the item's path (``/shop/item/7`` to ``/shop/``, where a
  category or a listing lives), or, with a ``listing.follow`` pattern, to a URL that pattern refuses while it
  accepted the item's; a redirect to ANOTHER item's stored record is found where records are (storage);
- a page matching the source's ``gone.selectors`` or ``gone.texts`` (a soft 404, answered 200).

A redirect that stays on the item (http to https, a canonical path) is not gone: the record is stored under
the final URL and the requested one is remembered.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from harvester.config import XPATH_PREFIX, SourceConfig
from harvester.scraping.extraction import PageData
from harvester.scraping.fetching import FetchResult
from harvester.urls import canonicalise_url

__all__ = ["gone_by_markers", "gone_by_status", "redirect_leaves_item"]

VISIBLE_TEXT = "//title//text() | //body//text()[not(ancestor::script) and not(ancestor::style)]"


def gone_by_status(source: SourceConfig, fetch: FetchResult) -> str | None:
    """The reason a detail page's status says its item is gone (None: it does not)."""
    if fetch.status is not None and fetch.status in source.gone.statuses and not fetch.ok:
        return f"HTTP {fetch.status}"
    return None


def _path_of(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.path.rstrip("/"), parts.query


def redirect_leaves_item(source: SourceConfig, requested: str, final: str) -> str | None:
    """Why a redirect from the item's URL to ``final`` left the item (None: it stays on the item).

    Both URLs are canonical. An http-to-https or a host-name change alone keeps the item: only the path
    (and query) decide."""
    if final == requested:
        return None
    final_path, final_query = _path_of(final)
    requested_path, _ = _path_of(requested)
    if not final_path and not final_query:
        return f"redirected to the home page {final}"
    if source.input.kind == "listing" and final in {canonicalise_url(seed) for seed in source.input.seeds}:
        return f"redirected to a listing page {final}"
    if final_path != requested_path and requested_path.startswith(final_path + "/") and not final_query:
        return f"redirected up to {final}"
    listing = source.listing
    if listing is not None and listing.follow not in (".*", ""):
        from harvester.patterns import compile_pattern

        follow = compile_pattern(listing.follow)
        if follow.search(requested) and not follow.search(final):
            return f"redirected to {final}, which is not an item page (listing.follow)"
    return None


def gone_by_markers(source: SourceConfig, data: PageData) -> str | None:
    """The ``gone`` marker an HTML page matches (a soft 404), or None. Selectors first: they are exact and
    cheap; the page's visible text is read only when the source names texts."""
    markers = source.gone
    if source.content != "html" or not (markers.selectors or markers.texts):
        return None
    selector = data.selector
    for expression in markers.selectors:
        found = (selector.xpath(expression[len(XPATH_PREFIX):]) if expression.startswith(XPATH_PREFIX)
                 else selector.css(expression))
        if found:
            return f"the page matches gone.selectors {expression!r}"
    if markers.texts:
        visible = " ".join(" ".join(selector.xpath(VISIBLE_TEXT).getall()).split()).casefold()
        for phrase in markers.texts:
            if " ".join(phrase.split()).casefold() in visible:
                return f"the page says {phrase!r} (gone.texts)"
    return None
