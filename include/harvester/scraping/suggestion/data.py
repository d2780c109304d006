"""What structured data offers: the attributes JSON-LD, microdata, a ``<script>``'s JSON and OpenGraph
``<meta>`` tags publish for a page, and the objects and lists of a JSON response."""

from __future__ import annotations

import json
import re
from typing import Any

from harvester.scraping.extraction import PageData, search
from harvester.scraping.suggestion.choices import KNOWN_KEYS, Choice, field_name, infer_type

IGNORED_KEYS = {"@context", "@id", "@type", "priceCurrency", "itemCondition", "position"}
SKIPPED_TYPES = {"WebPage", "WebSite", "Organization", "BreadcrumbList", "ItemList", "ListItem", "SearchAction",
                 "ImageObject", "SiteNavigationElement", "Person"}


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


def object_lists(data: Any, path: str = "", depth: int = 0) -> list[tuple[str, list[dict[str, Any]]]]:
    found: list[tuple[str, list[dict[str, Any]]]] = []
    if isinstance(data, list) and len(data) >= 2 and all(isinstance(item, dict) for item in data):
        found.append((path or "@", data))
    elif isinstance(data, dict) and depth < 3:
        for key, value in data.items():
            found += object_lists(value, f"{path}.{jmespath_key(key)}" if path else jmespath_key(key), depth + 1)
    return sorted(found, key=lambda entry: len(entry[1]), reverse=True)


def next_key(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    for path in ("next", "next_page", "nextPage", "next_url", "links.next", "paging.next", "_links.next.href"):
        if isinstance(search(path, data), str):
            return path
    return None
