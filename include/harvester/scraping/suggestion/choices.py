"""What a suggestion is made of: the attributes chosen with their reasons, the names and types a value
suggests, and the key that identifies a record."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_ATTRIBUTES = 16
# Field names users look for, by the keys structured data uses for them.
KNOWN_KEYS = {
    "name": "title", "headline": "title", "title": "title", "sku": "sku", "mpn": "mpn", "gtin13": "gtin",
    "productID": "product_id", "brand": "brand", "offers": "price", "price": "price", "availability": "in_stock",
    "inStock": "in_stock", "in_stock": "in_stock", "image": "image", "description": "description",
    "datePublished": "published", "dateModified": "modified", "releaseDate": "released", "released": "released",
    "author": "author", "aggregateRating": "rating", "stock": "stock", "tags": "tags", "url": "link",
    "currency": "currency", "id": "id",
}
KEY_NAMES = ("sku", "product_id", "gtin", "mpn", "id", "code")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_DOTTED_DATE = re.compile(r"^\d{1,2}[./]\d{1,2}[./]\d{4}$")
_CURRENCY = re.compile(r"[€$£¥₹₩₽]|\b(?:EUR|USD|GBP|CHF|JPY|SEK|NOK|DKK|PLN|CZK)\b")
_NUMBER_ONLY = re.compile(r"^-?\d+$")


@dataclass
class Choice:
    """One suggested attribute: its YAML mapping and why it was chosen."""

    name: str
    spec: dict[str, Any]
    why: str
    shown_sale: bool = False  # a price the page shows by the title under a sale/current/special class


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
    schema: str | None = None  # a target schema's name, "auto", or None: the page's own names
    include_all: bool = False  # with a schema, the fields outside it too
    sample_pages: list[Any] = field(default_factory=list, repr=False)  # other pages it must hold on
    detail_samples: list[str] = field(default_factory=list)  # a listing's detail pages after the first
    request_body: Any = None  # the JSON body of a POST endpoint (None: the URL is fetched with a GET)
    next_rule: dict[str, Any] | None = None  # listing.next of an API behind POST

    def add(self, choices: list[Choice], into: list[Choice] | None = None) -> None:
        """Add choices whose names are new (a richer source came first and wins)."""
        target = self.attributes if into is None else into
        taken = {choice.name for choice in target}
        for choice in choices:
            if choice.name not in taken and len(target) < MAX_ATTRIBUTES:
                target.append(choice)
                taken.add(choice.name)


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
