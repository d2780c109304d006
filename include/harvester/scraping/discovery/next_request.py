"""The next request of an API listing, built from its response (``listing.next``).

APIs page by what the response says rather than by a link: a GraphQL connection's ``pageInfo.endCursor``
goes into ``variables.after`` while ``hasNextPage``; a search's ``page`` plus one while ``page < nbPages``; an
offset plus a step. The next request is the same request with that one value changed (in the JSON body, the
form, or the URL's query when there is no body), so its identity (:func:`harvester.config.request_key`)
differs and the run's listing pages keep it once. It is one BFS level deeper, so ``listing.max_depth``
bounds the pages read as it bounds next-page links; a page without records ends the walk as ``while`` does.
"""

from __future__ import annotations

from typing import Any

from w3lib.url import add_or_replace_parameter, url_query_parameter

from harvester.config import HttpRequest, NextRequest, SourceConfig, request_key
from harvester.scraping.discovery.links import Discovery
from harvester.scraping.extraction import PageData, StructuredDataError, search

__all__ = ["add_next_request", "next_value"]


def add_next_request(source: SourceConfig, url: str, request: HttpRequest | None, page: PageData, depth: int,
                     discovery: Discovery) -> None:
    """Add the request after this one to ``discovery``'s listing pages, when the rule and the bounds allow."""
    listing = source.listing
    if listing is None or listing.next is None:
        return
    try:
        document = page.json
    except StructuredDataError:
        return
    value = next_value(listing.next, request, url, document)
    if value is None:
        return
    if depth + 1 > listing.max_depth:
        discovery.ignore("beyond_max_depth")
        return
    if request is not None and request.has_body:
        next_url, next_request = url, request.with_value(listing.next.into, value)
    else:
        next_url, next_request = add_or_replace_parameter(url, listing.next.into, str(value)), request
    key = request_key(next_url, next_request)
    if key == request_key(url, request):  # the same request again (a cursor that did not move): a loop
        discovery.ignore("repeated_on_page")
        return
    discovery.listings.append(key)
    discovery.requests[key] = (next_url, next_request)


def next_value(rule: NextRequest, request: HttpRequest | None, url: str, document: Any) -> Any:
    """The value the next request carries at ``rule.into``, or None when this response is the last page."""
    if rule.while_ is not None and not _truthy(search(rule.while_, document)):
        return None
    if rule.cursor is not None:
        cursor = search(rule.cursor, document)
        return cursor if isinstance(cursor, str | int) and not isinstance(cursor, bool) and cursor != "" else None
    current = _current(rule, request, url)
    if rule.page is not None:
        page = search(rule.page, document)
        number = page if _is_number(page) else current if current is not None else 1
        return int(number) + 1
    return (current or 0) + int(rule.offset or 0)


def _current(rule: NextRequest, request: HttpRequest | None, url: str) -> int | None:
    """The value this request sent at ``rule.into`` (body, else query), when it is a whole number."""
    sent: Any = request.value_at(rule.into) if request is not None and request.has_body else \
        url_query_parameter(url, rule.into)
    if isinstance(sent, str) and sent.strip().lstrip("-").isdigit():
        return int(sent)
    return int(sent) if _is_number(sent) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()


def _truthy(value: Any) -> bool:
    """JMESPath's truth: false, null, empty strings, lists and objects are false."""
    if value is None or value is False:
        return False
    return not (isinstance(value, str | list | dict) and not value)
