"""`harvester suggest URL`: a first source YAML from what a page publishes, every choice explained.

What a page publishes for its own front end and for search engines is typed and outlives redesigns,
so it is read first: JSON-LD, then microdata, then a JSON blob in a ``<script>`` (``__NEXT_DATA__``,
``window.__NUXT__ = {...}``), then OpenGraph ``<meta>`` tags; only where none of those holds a field
are CSS selectors suggested, from the page's prominent single elements and repeated lists. A listing
page (``--listing``) gets the detail-link selector and ``follow`` pattern from its largest group of
links of one shape, the next-page selector, and ``listing.records`` when its items carry the fields
themselves (one request per listing page instead of one per item). A JSON response gets ``content:
json`` with ``json:`` selectors, records of its largest list of objects and its ``next`` link.

Every suggested attribute is then extracted from the very page it was suggested from; one that does
not give a value there is left out (and named in a comment), so ``harvester try`` on the same URL
returns a record with every suggested attribute, and the YAML is validated before it is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from parsel import Selector

from harvester.scraping.structured import PageData, type_matches

MAX_ATTRIBUTES = 16
TEXT_MAX = 200
# Field names users look for, by the keys structured data uses for them.
KNOWN_KEYS = {
    "name": "title", "headline": "title", "title": "title", "sku": "sku", "mpn": "mpn", "gtin13": "gtin",
    "productID": "product_id", "brand": "brand", "offers": "price", "price": "price", "availability": "in_stock",
    "inStock": "in_stock", "in_stock": "in_stock", "image": "image", "description": "description",
    "datePublished": "published", "dateModified": "modified", "releaseDate": "released", "released": "released",
    "author": "author", "aggregateRating": "rating", "stock": "stock", "tags": "tags", "url": "link",
    "currency": "currency", "id": "id",
}
IGNORED_KEYS = {"@context", "@id", "@type", "priceCurrency", "itemCondition", "position"}
SKIPPED_TYPES = {"WebPage", "WebSite", "Organization", "BreadcrumbList", "ItemList", "ListItem", "SearchAction",
                 "ImageObject", "SiteNavigationElement", "Person"}
KEY_NAMES = ("sku", "product_id", "gtin", "mpn", "id", "code")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_DOTTED_DATE = re.compile(r"^\d{1,2}[./]\d{1,2}[./]\d{4}$")
_CURRENCY = re.compile(r"[€$£¥₹₩₽]|\b(?:EUR|USD|GBP|CHF|JPY|SEK|NOK|DKK|PLN|CZK)\b")
_NUMBER_ONLY = re.compile(r"^-?\d+$")
_NEXT_TEXT = re.compile("^\\s*(next( page)?|\u203a|\u00bb|>|\u2192|weiter|suivant)\\s*$", re.IGNORECASE)


@dataclass
class Choice:
    """One suggested attribute: its YAML mapping and why it was chosen."""

    name: str
    spec: dict[str, Any]
    why: str


@dataclass
class Suggestion:
    url: str
    name: str
    content: str = "html"
    render: str = "http"
    render_why: str = "the HTTP body has the fields: no browser needed"
    country: str | None = None
    kind: str = "details"
    attributes: list[Choice] = field(default_factory=list)
    listing: dict[str, Any] | None = None
    listing_why: list[str] = field(default_factory=list)
    records: list[Choice] = field(default_factory=list)
    records_item: dict[str, Any] | None = None
    records_why: str = ""
    key: list[str] = field(default_factory=list)
    key_why: str = ""
    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, choices: list[Choice], into: list[Choice] | None = None) -> None:
        """Add choices whose names are new (a richer source came first and wins)."""
        target = self.attributes if into is None else into
        taken = {choice.name for choice in target}
        for choice in choices:
            if choice.name not in taken and len(target) < MAX_ATTRIBUTES:
                target.append(choice)
                taken.add(choice.name)


# -- naming and typing ------------------------------------------------------------------------------------
def field_name(key: str) -> str:
    """A record field name for a data key or class name: snake_case, letters, digits and _."""
    if key in KNOWN_KEYS:
        return KNOWN_KEYS[key]
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()
    name = re.sub(r"[^a-z0-9_]+", "_", name).strip("_") or "field"
    if name[0].isdigit():
        name = f"f_{name}"
    return {"url": "link", "id": "id", "run_id": "run", "harvested_at": "harvested"}.get(name, name)


def infer_type(value: Any, key: str = "") -> tuple[str, dict[str, Any], str]:
    """The attribute type (and options) a value suggests, and why."""
    lowered = key.lower()
    if isinstance(value, bool):
        return "bool", {}, "a true/false value"
    if isinstance(value, dict):
        if {"price", "priceCurrency"} <= value.keys() or {"amount", "currency"} <= value.keys():
            return "price", {}, "an offer: exact amount and currency"
        return "str", {}, "an object"
    if isinstance(value, int | float):
        if "price" in lowered or "amount" in lowered:
            return "price", {}, "a price (exact decimal)"
        return ("int" if isinstance(value, int) else "float"), {}, "a number"
    if isinstance(value, list):
        if value and all(isinstance(element, str) for element in value):
            return "list[str]", {}, "a list of text"
        if value and all(isinstance(element, int) and not isinstance(element, bool) for element in value):
            return "list[int]", {}, "a list of numbers"
        return "str", {}, "a list"
    text = str(value).strip()
    if lowered in ("availability", "instock", "in_stock") or text.lower().endswith(("schema.org/instock",
                                                                                     "schema.org/outofstock")):
        return "bool", {}, "availability as in stock or not"
    if _ISO_DATETIME.match(text):
        return "datetime", {}, "an ISO 8601 date and time (stored timezone-aware, UTC)"
    if _ISO_DATE.match(text):
        return "date", {}, "an ISO 8601 date"
    if _DOTTED_DATE.match(text):
        separator = "." if "." in text else "/"
        return "date", {"format": f"%d{separator}%m{separator}%Y"}, f"a day-first date ({text})"
    if text.lower() in ("yes", "no", "in stock", "out of stock", "sold out", "available", "unavailable"):
        return "bool", {}, f"yes/no text ({text!r})"
    if lowered in ("image", "logo", "thumbnail", "photo", "link", "url", "href", "src") or text.startswith(("http://",
                                                                                                         "https://")):
        return "url", {}, "a link, resolved and canonicalised"
    if _CURRENCY.search(text) and re.search(r"\d", text):
        return "price", {}, f"a price with its currency ({text!r}): exact amount via price-parser"
    if ("price" in lowered or "amount" in lowered) and re.search(r"\d", text):
        return "price", {}, "a price (exact decimal)"
    if _NUMBER_ONLY.match(text.replace(",", "")):
        return "int", {}, f"a whole number ({text!r})"
    return "str", {}, "text"


# -- structured data --------------------------------------------------------------------------------------
def jmespath_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else json.dumps(key)


def _item_type(item: dict[str, Any]) -> str | None:
    types = item.get("@type")
    name = types[0] if isinstance(types, list) and types else types
    return re.split(r"[/#:]", name)[-1] if isinstance(name, str) else None


def main_item(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The item a page is about: the typed item with the most fields that is not page furniture."""
    candidates = [item for item in items if _item_type(item) and _item_type(item) not in SKIPPED_TYPES]
    return max(candidates, key=len, default=None)


def data_fields(item: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(field name, JMESPath, value) of an item's useful leaves: known keys first, one level of nesting."""
    found: list[tuple[str, str, Any]] = []
    for key, value in item.items():
        if key in IGNORED_KEYS or value in (None, "", [], {}):
            continue
        path = jmespath_key(key)
        if isinstance(value, list) and value and isinstance(value[0], dict):
            value, path = value[0], f"{path}[0]"
        if isinstance(value, dict):
            kind, _, _ = infer_type(value, key)
            if kind == "price":
                found.append(("price", path, value))
                if "availability" in value:
                    found.append(("in_stock", f"{path}.availability", value["availability"]))
                level = value.get("inventoryLevel")
                if isinstance(level, dict) and isinstance(level.get("value"), int):
                    found.append(("stock", f"{path}.inventoryLevel.value", level["value"]))
                continue
            for inner in ("name", "url", "ratingValue", "value"):
                if isinstance(value.get(inner), str | int | float) and not isinstance(value.get(inner), bool):
                    name = field_name(key) if inner in ("name", "url", "value") else f"{field_name(key)}_value"
                    found.append((name, f"{path}.{inner}", value[inner]))
                    break
            continue
        found.append((field_name(key), path, value))
    known = [entry for entry in found if entry[0] in KNOWN_KEYS.values()]
    return known + [entry for entry in found if entry[0] not in KNOWN_KEYS.values()]


def data_choices(fields: list[tuple[str, str, Any]], selector: Any, source_why: str) -> list[Choice]:
    choices = []
    for name, path, value in fields:
        kind, options, why = infer_type(value, path.rsplit(".", 1)[-1])
        spec = {**selector(path), **({"type": kind} if kind != "str" else {}), **options}
        choices.append(Choice(name, spec, f"{source_why} {path}: {why}"))
    return choices


def structured_choices(page: PageData) -> tuple[list[Choice], list[str]]:
    """Attributes from JSON-LD, microdata, script JSON and OpenGraph, richest first; and notes."""
    choices: list[Choice] = []
    notes: list[str] = []
    for kind, items in (("jsonld", page.jsonld_items()), ("microdata", page.microdata_items())):
        item = main_item(items)
        if item is None:
            continue
        item_type = _item_type(item)
        notes.append(f"{kind}: the page's {item_type} item ({len(item)} fields); structured data outlives redesigns")
        label = "JSON-LD" if kind == "jsonld" else "microdata"
        choices += data_choices(data_fields(item), lambda path, kind=kind, item_type=item_type: {
            kind: {"type": item_type, "path": path}}, f"the {item_type}'s {label}")
    for script, data in script_blobs(page):
        found = best_object(data)
        if found is None:
            continue
        path, obj = found
        notes.append(f"script_json: {script} holds the page's data ({len(obj)} fields at {path or '@'})")
        prefix = f"{path}." if path else ""
        choices += data_choices(data_fields(obj), lambda inner, script=script, prefix=prefix: {
            "script_json": {"script": script, "path": prefix + inner}}, f"the data in {script}:")
    meta = page.meta()
    meta_fields = [("title", "og:title"), ("image", "og:image"), ("price", "product:price:amount"),
                   ("sku", "product:retailer_item_id"), ("in_stock", "product:availability"),
                   ("description", "og:description"), ("description", "description")]
    for name, key in meta_fields:
        if meta.get(key) and meta[key][0].strip():
            kind, options, why = infer_type(meta[key][0], key.rsplit(":", 1)[-1])
            if name == "price":
                kind, options = "price", ({"currency": meta["product:price:currency"][0]}
                                          if re.fullmatch(r"[A-Z]{3}", (meta.get("product:price:currency") or [""])[0])
                                          else {})
            spec = {"meta": key, **({"type": kind} if kind != "str" else {}), **options}
            choices.append(Choice(name, spec, f"the page's <meta> {key}: {why}"))
    return choices, notes


def script_blobs(page: PageData) -> list[tuple[str, Any]]:
    """(selector, data) of the scripts that hold the page's own data."""
    found: list[tuple[str, Any]] = []
    for node in page.selector.css("script"):
        text = node.xpath("string()").get() or ""
        element_id = node.attrib.get("id")
        kind = (node.attrib.get("type") or "").lower()
        if kind == "application/ld+json" or not text.strip():
            continue
        if element_id and kind in ("application/json", ""):
            selector = f"script#{element_id}"
        elif (assignment := re.match(r"\s*(?:window\.|var |let |const )?([A-Za-z_$][\w$]*)\s*=\s*[{\[]", text)):
            selector = f"script:contains('{assignment.group(1)}')"
        else:
            continue
        data = page.script_data(selector)
        if data:
            found.append((selector, data[0]))
    return found


def best_object(data: Any, limit: int = 6) -> tuple[str, dict[str, Any]] | None:
    """The object in ``data`` that looks most like the page's subject: the most known keys (BFS)."""
    best: tuple[int, str, dict[str, Any]] | None = None
    queue: list[tuple[str, Any, int]] = [("", data, 0)]
    while queue:
        path, value, depth = queue.pop(0)
        if isinstance(value, dict):
            score = sum(1 for key in value if key in KNOWN_KEYS)
            if score >= 2 and (best is None or score > best[0]):
                best = (score, path, value)
            if depth < limit:
                for key, inner in value.items():
                    queue.append((f"{path}.{jmespath_key(key)}" if path else jmespath_key(key), inner, depth + 1))
        elif isinstance(value, list) and value and depth < limit:
            queue.append((f"{path}[0]", value[0], depth + 1))
    return (best[1], best[2]) if best else None


# -- markup ---------------------------------------------------------------------------------------------------
def _css_of(node: Selector) -> str | None:
    """``tag.class`` of an element with a class (the first class, which sites use for fields)."""
    classes = (node.attrib.get("class") or "").split()
    tag = node.root.tag if isinstance(node.root.tag, str) else None
    if not classes or tag is None or not re.fullmatch(r"[A-Za-z_-][\w-]*", classes[0]):
        return None
    return f"{tag}.{classes[0]}"


def css_choices(scope: Selector, relative: bool = False) -> list[Choice]:
    """CSS attributes for the scope's prominent single elements and repeated lists."""
    choices: list[Choice] = []
    counts: Counter[str] = Counter()
    nodes: dict[str, list[Selector]] = defaultdict(list)
    for node in scope.xpath(".//*[@class]"):
        css = _css_of(node)
        if css is None or (css.split(".")[0] in ("nav", "footer", "script", "style", "body", "html", "main", "ul",
                                                 "ol", "article", "section", "div") and not relative):
            continue
        counts[css] += 1
        nodes[css].append(node)
    headings = scope.xpath(".//h1") if not relative else []
    if len(headings) == 1 and not _css_of(headings[0]):
        choices.append(Choice("title", {"css": "h1::text"}, "the page's one <h1>: its title"))
    for css, count in counts.items():
        node = nodes[css][0]
        tag = css.split(".")[0]
        name = field_name(css.split(".", 1)[1])
        if tag == "img":
            choices.append(Choice(name, {"css": f"{css}::attr(src)", "type": "url"}, f"the image {css}: its src"))
            continue
        if tag == "a" and count == 1:
            choices.append(Choice(name, {"css": f"{css}::attr(href)", "type": "url"}, f"the link {css}: its href"))
            continue
        if tag == "time" and node.attrib.get("datetime"):
            kind, options, why = infer_type(node.attrib["datetime"])
            choices.append(Choice(name, {"css": f"{css}::attr(datetime)", "type": kind, **options},
                                  f"{css}'s datetime attribute: {why}"))
            continue
        texts = [" ".join((element.xpath("string()").get() or "").split()) for element in nodes[css]]
        if not texts[0] or len(texts[0]) > (2000 if tag == "p" else TEXT_MAX) or node.xpath("./*[@class]"):
            continue
        if count == 1:
            kind, options, why = infer_type(texts[0], name)
            spec = {"css": f"{css}::text", **({"type": kind} if kind != "str" else {}), **options}
            choices.append(Choice(name, spec, f"the one {css} on the page: {why}"))
        elif tag == "li" and not relative:
            kinds = {infer_type(text)[0] for text in texts}
            kind = "list[int]" if kinds == {"int"} else "list[str]"
            choices.append(Choice(name + ("s" if not name.endswith("s") else ""), {"css": f"{css}::text", "type": kind},
                                  f"{count} {css} elements: a list"))
    return choices


# -- listing pages ----------------------------------------------------------------------------------------------
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
    classes = Counter(css for anchor, _ in links if (css := _css_of(anchor)))
    if classes:
        css, _ = classes.most_common(1)[0]
        return f"{css}::attr(href)", f"{css}: the class of the repeated links"
    parents = Counter(css for anchor, _ in links if (css := _css_of(anchor.xpath("..")[0])))
    if parents:
        css, _ = parents.most_common(1)[0]
        return f"{css} > a::attr(href)", f"the links inside the repeated {css}"
    return "a::attr(href)", "every link (the follow pattern keeps the detail pages)"


def next_page(page: PageData) -> tuple[str, str] | None:
    for css, why in (("a[rel=next]", "the link marked rel=next"), ("a.next", "the link of class next")):
        if page.selector.css(css):
            return f"{css}::attr(href)", why
    for anchor in page.selector.css("a[href]"):
        if _NEXT_TEXT.match(anchor.xpath("string()").get() or "") and (css := _css_of(anchor)):
            return f"{css}::attr(href)", f"the link reading {anchor.xpath('string()').get().strip()!r}"
    return None


def item_element(anchor: Selector, count: int, page: PageData) -> str | None:
    """The repeated element around a detail link (li.card), when there are about as many as links."""
    for ancestor in anchor.xpath("ancestor::*[@class]")[::-1]:
        css = _css_of(ancestor)
        if css and count <= len(page.selector.css(css)) <= count * 2:
            return css
    return None


def pick_key(choices: list[Choice], values: dict[str, list[Any]] | None = None) -> tuple[list[str], str]:
    names = [choice.name for choice in choices if choice.spec.get("type", "str") in ("str", "int")]
    for candidate in KEY_NAMES:
        if candidate in names:
            return [candidate], f"{candidate} identifies an item"
    if values:
        for name in names:
            column = values.get(name) or []
            if column and len(set(map(str, column))) == len(column) and name != "title":
                return [name], f"{name} is different for every item of the page"
    return [], ""


# -- the suggestion ---------------------------------------------------------------------------------------------
def suggest_detail(page: PageData, suggestion: Suggestion) -> None:
    choices, notes = structured_choices(page)
    suggestion.notes += notes
    suggestion.add(choices)
    css = css_choices(page.selector)
    if len(suggestion.attributes) < 2 or not choices:
        suggestion.add(css)
    key, why = pick_key(suggestion.attributes)
    suggestion.key, suggestion.key_why = (key, why) if key else (["url"], "no identifier found: the page's url")


def suggest_json(page: PageData, suggestion: Suggestion) -> None:
    suggestion.content = "json"
    data = page.json
    lists = _object_lists(data)
    if lists:
        path, items = lists[0]
        suggestion.kind = "listing"
        suggestion.records_item = {"json": path}
        suggestion.records_why = f"{path}: the response's largest list of objects ({len(items)} items)"
        suggestion.add(data_choices(data_fields(items[0]), lambda inner: {"json": inner}, "each item's"),
                       suggestion.records)
        values = {choice.name: [_search(choice.spec["json"], item) for item in items] for choice in suggestion.records}
        suggestion.key, suggestion.key_why = pick_key(suggestion.records, values)
        following = _next_key(data)
        suggestion.listing = {"next_page_selectors": [f"json:{following}"]} if following else {}
        if following:
            suggestion.listing_why.append(f"next_page_selectors: json:{following}, the response's next page")
        return
    found = best_object(data) or ("", data if isinstance(data, dict) else {})
    path, obj = found
    prefix = f"{path}." if path else ""
    suggestion.add(data_choices(data_fields(obj), lambda inner: {"json": prefix + inner}, "the response's"))
    key, why = pick_key(suggestion.attributes)
    suggestion.key, suggestion.key_why = (key, why) if key else (["url"], "no identifier found: the page's url")


def _search(expression: str, data: Any) -> Any:
    from harvester.scraping.structured import search

    return search(expression, data)


def _object_lists(data: Any, path: str = "", depth: int = 0) -> list[tuple[str, list[dict[str, Any]]]]:
    found: list[tuple[str, list[dict[str, Any]]]] = []
    if isinstance(data, list) and len(data) >= 2 and all(isinstance(item, dict) for item in data):
        found.append((path or "@", data))
    elif isinstance(data, dict) and depth < 3:
        for key, value in data.items():
            found += _object_lists(value, f"{path}.{jmespath_key(key)}" if path else jmespath_key(key), depth + 1)
    return sorted(found, key=lambda entry: len(entry[1]), reverse=True)


def _next_key(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    for path in ("next", "next_page", "nextPage", "next_url", "links.next", "paging.next", "_links.next.href"):
        if isinstance(_search(path, data), str):
            return path
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
    # records: structured items (an ItemList), else the repeated element around each link
    items = [item for item in page.jsonld_items() if type_matches(item, "ItemList")]
    elements = item_element(links[0][0], len(distinct), page)
    if items and isinstance(items[0].get("itemListElement"), list) and items[0]["itemListElement"]:
        first = items[0]["itemListElement"][0]
        inner = "itemListElement[].item" if isinstance(first, dict) and isinstance(first.get("item"), dict) \
            else "itemListElement[]"
        objects = _search(inner, items[0]) or []
        if objects and isinstance(objects[0], dict):
            suggestion.records_item = {"jsonld": {"type": "ItemList", "path": inner}}
            suggestion.records_why = f"the page's ItemList JSON-LD: {len(objects)} items with their fields"
            suggestion.add(data_choices(data_fields(objects[0]), lambda path: {"json": path}, "each item's"),
                           suggestion.records)
            values = {choice.name: [_search(choice.spec["json"], obj) for obj in objects]
                      for choice in suggestion.records}
            suggestion.key, suggestion.key_why = pick_key(suggestion.records, values)
    if not suggestion.records and elements:
        first_item = page.selector.css(elements)[0]
        choices = [choice for choice in css_choices(first_item, relative=True)]
        if len(choices) >= 3:
            suggestion.records_item = {"css": elements}
            suggestion.records_why = f"{elements}: {len(page.selector.css(elements))} repeated items around the links"
            suggestion.add(choices, suggestion.records)
            values = {choice.name: [] for choice in suggestion.records}
            for item in page.selector.css(elements):
                for choice in suggestion.records:
                    values[choice.name].append(item.css(choice.spec["css"]).get())
            suggestion.key, suggestion.key_why = pick_key(suggestion.records, values)
    if suggestion.records and suggestion.key:
        suggestion.listing_why.append(f"no link_selectors: the items carry the fields, so detail pages need not be "
                                      f"visited (one request per listing page; the detail links are {selector})")
        return None
    suggestion.records, suggestion.records_item = [], None
    suggestion.listing.update({"link_selectors": [selector], "follow": follow})
    suggestion.listing_why += [f"link_selectors: {why} ({len(distinct)} links like {distinct[0]})",
                               f"follow: the shape those links share, {shape}, on this site only"]
    return distinct[0]


# -- YAML -------------------------------------------------------------------------------------------------------
def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_flow(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _attribute_lines(choices: list[Choice], indent: str, required: set[str]) -> list[str]:
    lines = []
    for choice in choices:
        spec = {**choice.spec, **({"required": True} if choice.name in required else {})}
        lines.append(f"{indent}# {choice.name}: {choice.why}" + (" (required: it keys the record)"
                                                                  if choice.name in required else ""))
        lines.append(f"{indent}{choice.name}: {_flow(spec)}")
    return lines


def render_yaml(suggestion: Suggestion, command: str) -> str:
    lines = ["# yaml-language-server: $schema=./source.schema.json",
             f"# Suggested by `{command}` on {datetime.now(UTC):%Y-%m-%d}; check it with `harvester try`.",
             *(f"# {note}" for note in suggestion.notes),
             f"name: {suggestion.name}"]
    if suggestion.content == "json":
        lines += ["# content: json: the URL answers JSON, read with json: (JMESPath) selectors", "content: json"]
    lines += [f"# render: {suggestion.render}: {suggestion.render_why}", f"render: {suggestion.render}"]
    if suggestion.country:
        lines += ["# country: the page slots' country (browser sources need one: its proxy is "
                  "AIRFLOW_CONN_PROXY_<COUNTRY>)", f"country: {suggestion.country}"]
    lines += ["input:", f"  # kind: {suggestion.kind}: "
              + ("the seed is a listing page" if suggestion.kind == "listing" else "the seed is a detail page"),
              f"  kind: {suggestion.kind}", f"  seeds: [{json.dumps(suggestion.url)}]"]
    required = set(suggestion.key) - {"url"}
    if suggestion.listing is not None:
        lines.append("listing:")
        for why in suggestion.listing_why:
            lines.append(f"  # {why}")
        for key in ("link_selectors", "next_page_selectors", "follow", "max_depth"):
            if key in suggestion.listing:
                lines.append(f"  {key}: {_flow(suggestion.listing[key])}")
        if suggestion.records:
            lines += [f"  # records: {suggestion.records_why}", "  records:",
                      f"    item: {_flow(suggestion.records_item)}", "    attributes:",
                      *_attribute_lines(suggestion.records, "      ", required),
                      f"    # key: {suggestion.key_why}", f"    key: {_flow(suggestion.key)}"]
    if suggestion.attributes:
        lines += ["attributes:", *_attribute_lines(suggestion.attributes, "  ", required)]
    if not suggestion.records:
        lines += ["output:", f"  # key: {suggestion.key_why}", f"  key: {_flow(suggestion.key)}"]
    for dropped in suggestion.dropped:
        lines.append(f"# not suggested: {dropped}")
    return "\n".join(lines) + "\n"


# -- checking against the page ------------------------------------------------------------------------------------
def prune(suggestion: Suggestion, pages: dict[str, PageData]) -> None:
    """Drop the attributes that give no value on the page they were suggested from."""
    from harvester.config import parse_source
    from harvester.scraping.extraction import extract_listing_records, extract_record

    source = parse_source(render_yaml(suggestion, "harvester suggest"), "<suggested>")
    if suggestion.records and "listing" in pages:
        listing = extract_listing_records(source, pages["listing"], suggestion.url)
        bad = {problem.attribute: str(problem) for extraction in listing.extractions[:3]
               for problem in extraction.problems}
        suggestion.dropped += [bad[choice.name] for choice in suggestion.records if choice.name in bad]
        suggestion.records = [choice for choice in suggestion.records if choice.name not in bad]
    if suggestion.attributes and "details" in pages:
        extraction = extract_record(source, pages["details"], pages["details"].url)
        bad = {problem.attribute: str(problem) for problem in extraction.problems}
        suggestion.dropped += [bad[choice.name] for choice in suggestion.attributes if choice.name in bad]
        suggestion.attributes = [choice for choice in suggestion.attributes if choice.name not in bad]
    if suggestion.key != ["url"] and not set(suggestion.key) <= {choice.name for choice in
                                                                 suggestion.attributes + suggestion.records}:
        suggestion.key, suggestion.key_why = ["url"], "the identifier gave no value: the page's url"


async def _fetch(url: str, name: str, render: str, country: str | None, content: str = "html") -> Any:
    """The page as `harvester try` fetches it (:func:`harvester.scraping.commands.fetch_for_try`)."""
    from harvester.config import SourceConfig
    from harvester.scraping.commands import fetch_for_try
    from harvester.settings import get_settings

    probe = SourceConfig.model_validate({"name": name, "render": render, "country": country, "content": content,
                                         "input": {"seeds": [url]},
                                         "attributes": {"probe": "json:@" if content == "json" else "title"}})
    return await fetch_for_try(probe, url, get_settings())


def _is_json(fetch: Any) -> bool:
    media = (fetch.content_type or "").split(";", 1)[0].strip().lower()
    return media.endswith(("/json", "+json")) or (not media and fetch.text.lstrip()[:1] in ("{", "["))


def suggest(url: str, name: str, listing: bool = False, render: str | None = None, country: str = "SG"
            ) -> Suggestion:
    """Fetch the page (HTTP; Chromium when asked, or when the HTTP body lacks what the rendered page has)."""
    suggestion = Suggestion(url, name)
    mode = render or "http"
    fetch = asyncio.run(_fetch(url, name, mode, country if mode == "browser" else None))
    if fetch.outcome == "parse_error" and "content type" in fetch.reason and "json" in fetch.reason:
        fetch = asyncio.run(_fetch(url, name, "http", None, "json"))  # an API: read its JSON
    if not fetch.ok:
        raise SuggestError(f"{url}: {fetch.counter}: {fetch.reason or 'no page'}")
    suggestion.render = mode
    if mode == "browser":
        suggestion.render_why, suggestion.country = "asked for with --render browser", country
    pages = analyse(fetch, suggestion, listing)
    if render is None and not _is_json(fetch) and len(suggestion.attributes) + len(suggestion.records) < 2 \
            and not listing:
        browser = Suggestion(url, name, render="browser", country=country)
        try:
            rendered = asyncio.run(_fetch(url, name, "browser", country))
        except Exception as error:  # no Chromium here: the HTTP suggestion stands, with the reason
            suggestion.notes.append(f"the HTTP body had few fields and rendering failed: {error}")
        else:
            if rendered.ok:
                rendered_pages = analyse(rendered, browser, listing)
                if len(browser.attributes) > len(suggestion.attributes):
                    browser.render_why = (f"the HTTP body has {len(suggestion.attributes)} of the fields the rendered "
                                          f"page has ({len(browser.attributes)}): the page is built by JavaScript")
                    suggestion, pages = browser, rendered_pages
    if listing and suggestion.kind == "listing" and not suggestion.records and (detail := pages.pop("first_detail",
                                                                                                    None)):
        detail_fetch = asyncio.run(_fetch(detail, name, suggestion.render, suggestion.country))
        if detail_fetch.ok:
            pages["details"] = page_of(detail_fetch, detail, suggestion.content)
            suggestion.notes.append(f"attributes: from the first detail page, {detail}")
            suggest_detail(pages["details"], suggestion)
    prune(suggestion, pages)
    return suggestion


def page_of(fetch: Any, url: str, content: str) -> PageData:
    from harvester.scraping.structured import DataBounds

    return PageData(fetch.text, fetch.final_url or url, content, DataBounds.from_settings())


def analyse(fetch: Any, suggestion: Suggestion, listing: bool) -> dict[str, Any]:
    """Fill ``suggestion`` from one fetched page; the pages to check it against."""
    if _is_json(fetch):
        page = page_of(fetch, suggestion.url, "json")
        suggest_json(page, suggestion)
        return {"listing" if suggestion.records else "details": page}
    page = page_of(fetch, suggestion.url, "html")
    if listing:
        first = suggest_listing(page, suggestion)
        return {"listing": page, **({"first_detail": first} if first else {})}
    suggest_detail(page, suggestion)
    return {"details": page}


class SuggestError(Exception):
    """The page could not be fetched or read."""


# -- the command ----------------------------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "suggest", help="write a first source YAML from what a page publishes (JSON-LD, microdata, script JSON, "
                        "OpenGraph, else CSS)",
        description="Fetch URL and print a source YAML for it (or write it to FILE), each choice explained in a "
                    "comment. Check it with `harvester try FILE URL`.")
    parser.add_argument("url", help="a detail page, or a listing page with --listing, or a JSON API URL")
    parser.add_argument("--name", help="the source name (default: from the URL's host)")
    parser.add_argument("--listing", action="store_true",
                        help="the URL is a listing page: suggest its detail links, pagination and records")
    parser.add_argument("--render", choices=["http", "browser"],
                        help="fetch over HTTP or render in Chromium (default: HTTP, and Chromium when the HTTP body "
                             "lacks what the rendered page has)")
    parser.add_argument("--country", default="SG", help="browser sources: the page slots' country (default SG)")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the YAML here instead of printing it")
    parser.set_defaults(handler=_suggest)


def default_name(url: str) -> str:
    host = (urlsplit(url).hostname or "site").removeprefix("www.")
    name = re.sub(r"[^a-z0-9]+", "_", host.lower()).strip("_")
    return (name if name and name[0].isalpha() else f"site_{name}")[:63]


def _suggest(args: argparse.Namespace) -> int:
    from harvester.config import parse_source
    from harvester.errors import SourceConfigError

    name = args.name or default_name(args.url)
    command = "harvester suggest " + " ".join(
        [args.url, *(["--listing"] if args.listing else []), *(["--render", args.render] if args.render else [])])
    try:
        suggestion = suggest(args.url, name, args.listing, args.render, args.country)
    except SuggestError as error:
        print(f"harvester suggest: {error}", file=sys.stderr)
        return 1
    text = render_yaml(suggestion, command)
    try:
        parse_source(text, str(args.output or "<suggested>"))
    except SourceConfigError as error:  # a suggestion that does not validate is a bug: say so, show it
        print(text, file=sys.stderr)
        print(f"harvester suggest: the suggestion does not validate: {error}", file=sys.stderr)
        return 1
    if args.output:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}: {len(suggestion.attributes) + len(suggestion.records)} attributes; "
              f"check it with `harvester try {args.output}`", file=sys.stderr)
    else:
        print(text, end="")
    return 0
