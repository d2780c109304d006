"""A listing page's structure: its detail links (the largest group of links of one shape, a selector
and a ``follow`` pattern), its next page, and ``listing.records`` when its items carry the fields."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any
from urllib.parse import urlsplit

from parsel import Selector

from harvester.scraping.extraction import PageData, search, type_matches
from harvester.scraping.suggestion.choices import Suggestion, pick_key
from harvester.scraping.suggestion.data import data_choices, data_fields
from harvester.scraping.suggestion.markup import css_choices, css_of

_NEXT_TEXT = re.compile("^\\s*(next( page)?|\u203a|\u00bb|>|\u2192|weiter|suivant)\\s*$", re.IGNORECASE)


def url_shape(url: str) -> str:
    """A URL's path with its digit runs as \\d+ (the shape detail links share)."""
    path = urlsplit(url).path
    return "".join(r"\d+" if part.isdigit() else re.escape(part) for part in re.split(r"(\d+)", path) if part)


def link_groups(page: PageData) -> list[tuple[str, list[tuple[Selector, str]]]]:
    """Same-host links grouped by their shape, largest group (distinct URLs) first."""
    from harvester.urls import canonicalise_url

    host = urlsplit(page.url)[:2]
    groups: dict[str, list[tuple[Selector, str]]] = defaultdict(list)
    for anchor in page.selector.css("a[href]"):
        url = canonicalise_url(anchor.attrib["href"], page.url)
        if url is None or urlsplit(url)[:2] != host or urlsplit(url).path == urlsplit(page.url).path:
            continue
        shape = url_shape(url)
        if r"\d+" in shape:
            groups[shape].append((anchor, url))
    ranked = sorted(groups.items(), key=lambda item: len({url for _, url in item[1]}), reverse=True)
    return [(shape, links) for shape, links in ranked if len({url for _, url in links}) >= 2]


def link_selector(links: list[tuple[Selector, str]]) -> tuple[str, str]:
    """A CSS selector of a group's links, and why: the class most of them share, else their parent's."""
    classes = Counter(css for anchor, _ in links if (css := css_of(anchor)))
    if classes:
        css, _ = classes.most_common(1)[0]
        return f"{css}::attr(href)", f"{css}: the class of the repeated links"
    parents = Counter(css for anchor, _ in links if (css := css_of(anchor.xpath("..")[0])))
    if parents:
        css, _ = parents.most_common(1)[0]
        return f"{css} > a::attr(href)", f"the links inside the repeated {css}"
    return "a::attr(href)", "every link (the follow pattern keeps the detail pages)"


def next_page(page: PageData) -> tuple[str, str] | None:
    for css, why in (("a[rel=next]", "the link marked rel=next"), ("a.next", "the link of class next")):
        if page.selector.css(css):
            return f"{css}::attr(href)", why
    for anchor in page.selector.css("a[href]"):
        if _NEXT_TEXT.match(anchor.xpath("string()").get() or "") and (css := css_of(anchor)):
            return f"{css}::attr(href)", f"the link reading {anchor.xpath('string()').get().strip()!r}"
    return None


def item_element(anchor: Selector, count: int, page: PageData) -> str | None:
    """The repeated element around a detail link (li.card), when there are about as many as links."""
    for ancestor in anchor.xpath("ancestor::*[@class]")[::-1]:
        css = css_of(ancestor)
        if css and count <= len(page.selector.css(css)) <= count * 2:
            return css
    return None


def suggest_listing(page: PageData, suggestion: Suggestion) -> str | None:
    """Links, pagination and (when the items carry the fields) records; the first detail URL to look at."""
    suggestion.kind = "listing"
    suggestion.listing = {}
    groups = link_groups(page)
    following = next_page(page)
    if following:
        suggestion.listing.update({"next_page_selectors": [following[0]], "max_depth": 5})
        suggestion.listing_why += [f"next_page_selectors: {following[1]}",
                                   "max_depth: 5 listing pages deep (raise it to read more of the pagination)"]
    if not groups:
        suggestion.notes.append("no repeated links found on this page: is it a listing?")
        return None
    shape, links = groups[0]
    origin = "{}://{}".format(*urlsplit(page.url)[:2])
    follow = f"^{re.escape(origin)}{shape}$"
    selector, why = link_selector(links)
    distinct = sorted({url for _, url in links})
    suggestion.detail_samples = distinct[1:3]  # the suggestion must hold on these detail pages too
    # records: structured items (an ItemList), else the repeated element around each link
    records_from_item_list(page, suggestion)
    if not suggestion.records and (elements := item_element(links[0][0], len(distinct), page)):
        records_from_repeated_items(page, elements, suggestion)
    if suggestion.records and suggestion.key:
        suggestion.listing_why.append(f"no link_selectors: the items carry the fields, so detail pages need not be "
                                      f"visited (one request per listing page; the detail links are {selector})")
        return None
    suggestion.records, suggestion.records_item = [], None
    suggestion.listing.update({"link_selectors": [selector], "follow": follow})
    suggestion.listing_why += [f"link_selectors: {why} ({len(distinct)} links like {distinct[0]})",
                               f"follow: the shape those links share, {shape}, on this site only"]
    return distinct[0]


def records_from_item_list(page: PageData, suggestion: Suggestion) -> None:
    """``listing.records`` from the page's ItemList JSON-LD, when its items are objects with fields."""
    items = [item for item in page.jsonld_items() if type_matches(item, "ItemList")]
    if not (items and isinstance(items[0].get("itemListElement"), list) and items[0]["itemListElement"]):
        return
    first = items[0]["itemListElement"][0]
    inner = "itemListElement[].item" if isinstance(first, dict) and isinstance(first.get("item"), dict) \
        else "itemListElement[]"
    objects = search(inner, items[0]) or []
    if objects and isinstance(objects[0], dict):
        suggestion.records_item = {"jsonld": {"type": "ItemList", "path": inner}}
        suggestion.records_why = f"the page's ItemList JSON-LD: {len(objects)} items with their fields"
        suggestion.add(data_choices(data_fields(objects[0]), lambda path: {"json": path}, "each item's"),
                       suggestion.records)
        values = {choice.name: [search(choice.spec["json"], obj) for obj in objects]
                  for choice in suggestion.records}
        suggestion.key, suggestion.key_why = pick_key(suggestion.records, values)


def records_from_repeated_items(page: PageData, elements: str, suggestion: Suggestion) -> None:
    """``listing.records`` from the repeated element around each link, when it holds three fields or more."""
    choices = css_choices(page.selector.css(elements)[0], relative=True)
    if len(choices) < 3:
        return
    suggestion.records_item = {"css": elements}
    suggestion.records_why = f"{elements}: {len(page.selector.css(elements))} repeated items around the links"
    suggestion.add(choices, suggestion.records)
    values: dict[str, list[Any]] = {choice.name: [] for choice in suggestion.records}
    for item in page.selector.css(elements):
        for choice in suggestion.records:
            values[choice.name].append(item.css(choice.spec["css"]).get())
    suggestion.key, suggestion.key_why = pick_key(suggestion.records, values)
