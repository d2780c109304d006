"""A suggestion in a target schema's terms: for each field, every place the page says it, in order of trust
(JSON-LD, microdata, ``<meta>``, ``itemprop`` markup, label-value rows, the page's prominent elements), each
candidate extracted from the page, and the first that gives a sound value kept.

Trying the candidates on the page is what makes the order of trust safe: a JSON-LD ``offers`` without a price,
a ``<meta>`` with an empty amount or a label row whose value is a button fall through to the next place that
says the field, instead of leaving it out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from harvester.scraping.extraction import PageData, search, type_matches
from harvester.scraping.suggestion.choices import Choice
from harvester.scraping.suggestion.identifiers import (
    address_identifier_candidates,
    identifier_candidates,
    shown_in,
    visible_text,
)
from harvester.scraping.suggestion.labels import (
    add_to_cart,
    add_to_cart_control,
    identifier_shaped,
    label_candidates,
    prominent_price,
)
from harvester.scraping.suggestion.largest_type import largest_type_price
from harvester.scraping.suggestion.schemas import (
    ANY_OFFER_AVAILABLE,
    PRODUCT,
    TARGET_SCHEMAS,
    TargetField,
    TargetSchema,
    schema_of_type,
)

NAME_MAX = 300
_IDENTIFIERS = ("sku", "gtin", "mpn")


def structured_type(items: list[dict[str, Any]], schema: TargetSchema) -> tuple[str, dict[str, Any]] | None:
    """The page's item of the schema's type (the one with the most fields) and its type name."""
    found = [(wanted, item) for item in items for wanted in schema.types if type_matches(item, wanted)]
    return max(found, key=lambda entry: len(entry[1]), default=None)


def _empty(value: Any) -> bool:
    return value is None or value in ("", [], {}) or (isinstance(value, dict) and not _useful_object(value))


def _useful_object(value: dict[str, Any]) -> bool:
    return any(key in value for key in ("price", "lowPrice", "amount", "name", "url", "value", "minValue"))


def structured_candidates(page: PageData, schema: TargetSchema, target: TargetField) -> Iterator[Choice]:
    for kind, items, label in (("jsonld", page.jsonld_items(), "JSON-LD"),
                               ("microdata", page.microdata_items(), "microdata")):
        found = structured_type(items, schema)
        if found is None:
            continue
        item_type, item = found
        for path in target.paths:
            try:
                value = search(path, item)
            except ValueError:  # a function path (any offer available) on a shape it does not fit: not here
                continue
            if path == ANY_OFFER_AVAILABLE and search("to_array(offers)[].availability", item) in (None, []):
                continue  # no offer says its availability: false would be a guess
            if _empty(value) or (isinstance(value, list) and target.type != "url"):
                continue
            spec = {kind: {"type": item_type, "path": path}, **_typed(target)}
            yield Choice(target.name, spec, f"the {item_type}'s {label} {path}: {target.why}")


def _typed(target: TargetField) -> dict[str, Any]:
    return {"type": target.type} if target.type != "str" else {}


def meta_candidates(page: PageData, target: TargetField) -> Iterator[Choice]:
    meta = page.meta()
    for key in target.meta:
        if meta.get(key) and meta[key][0].strip():
            options: dict[str, Any] = {}
            currency = (meta.get("product:price:currency") or meta.get("og:price:currency") or [""])[0].strip()
            if target.type == "price" and re.fullmatch(r"[A-Z]{3}", currency):
                options["currency"] = currency
            yield Choice(target.name, {"meta": key, **_typed(target), **options},
                         f"the page's <meta> {key}: {target.why}")


def itemprop_candidates(page: PageData, target: TargetField) -> Iterator[Choice]:
    """``itemprop`` marks outside a readable item (microdata a parser could not attach still marks the field)."""
    for prop in target.itemprops:
        nodes = page.selector.css(f"[itemprop={prop}]")
        if not nodes:
            continue
        node = nodes[0]
        if node.attrib.get("content", "").strip():
            css = f"[itemprop={prop}]::attr(content)"
        elif node.attrib.get("href") and prop == "availability":
            css = f"[itemprop={prop}]::attr(href)"
        elif node.root.tag == "img":
            css = f"[itemprop={prop}]::attr(src)"
        else:
            css = f"[itemprop={prop}]"
        yield Choice(target.name, {"css": css, **_typed(target)}, f"the element marked itemprop={prop}: {target.why}")
        if css.endswith("::attr(content)") and target.name in _IDENTIFIERS and node.xpath("normalize-space()").get():
            # the identifier as the page writes it ("466/7999"), when the markup's content is a machine form
            yield Choice(target.name, {"css": f"[itemprop={prop}]"},
                         f"the text of the element marked itemprop={prop}: {target.why}")


def markup_candidates(page: PageData, target: TargetField) -> Iterator[Choice]:
    """What the page shows: label rows, then the prominent element for the field (for a price: the one marked
    price beside the title, then the amount in the page's largest type)."""
    yield from label_candidates(page.selector, target)
    if target.name in ("name", "title", "headline"):
        yield Choice(target.name, {"css": "h1"}, f"the page's first <h1>: {target.why}")
    elif target.type == "price":
        yield from prominent_price(page.selector, target)
        yield from largest_type_price(page.selector, target)
    elif target.name == "availability":
        yield from add_to_cart(page.selector, target)


def candidates(page: PageData, schema: TargetSchema, target: TargetField) -> list[Choice]:
    shown = [*identifier_candidates(page, target)] if target.name == "sku" else []
    addressed = [*address_identifier_candidates(page, target)] if target.name == "sku" else []
    return [*structured_candidates(page, schema, target), *meta_candidates(page, target),
            *itemprop_candidates(page, target), *shown, *markup_candidates(page, target), *addressed]


def sound(target: TargetField, value: Any) -> bool:
    """Whether an extracted value can be the field: a positive price, an identifier-shaped sku, a short name."""
    if value is None or value == "" or value == []:
        return False
    if target.type == "price":
        return isinstance(value, dict) and value.get("amount") is not None and value["amount"] > 0
    if target.name in ("sku", "gtin", "mpn"):
        return isinstance(value, str) and identifier_shaped(value)
    if target.name in ("name", "title", "headline"):
        return isinstance(value, str) and 1 < len(value) <= NAME_MAX
    if target.name == "currency":
        return isinstance(value, str) and len(value) <= 5
    return True


def _probe_values(page: PageData, specs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every candidate extracted from one page at once (one source of numbered attributes)."""
    from harvester.config import SourceConfig
    from harvester.scraping.extraction import extract_record

    if not specs:
        return {}
    probe = SourceConfig.model_validate({"name": "probe", "input": {"seeds": [page.url]}, "attributes": specs})
    return extract_record(probe, page, page.url).values


def _valid(choice: Choice, url: str) -> bool:
    from harvester.config import SourceConfig

    try:
        SourceConfig.model_validate({"name": "probe", "input": {"seeds": [url]}, "attributes": {"probe": choice.spec}})
    except ValueError:  # a candidate the config refuses (an odd label in an xpath) is no candidate
        return False
    return True


def offered(pages: list[PageData], schema: TargetSchema) -> dict[str, Choice]:
    """Every page's candidates, numbered, in order of trust (the first page's first); each selector once."""
    numbered: dict[str, Choice] = {}
    seen: set[str] = set()
    for target in schema.fields:
        for page in pages:
            for choice in candidates(page, schema, target):
                identity = f"{target.name} {sorted(choice.spec.items())!r}"
                if identity not in seen and _valid(choice, page.url):
                    seen.add(identity)
                    numbered[f"candidate_{len(numbered)}"] = choice
    return numbered


def first_sound(pages: list[PageData], schema: TargetSchema) -> tuple[list[Choice], list[str]]:
    """Each field's first candidate that gives a sound value on every page (the suggested one and the samples);
    notes on the fields none gave everywhere."""
    numbered = offered(pages, schema)
    specs = {key: choice.spec for key, choice in numbered.items()}
    values = [_probe_values(page, specs) for page in pages]
    chosen, notes = [], []
    for target in schema.fields:
        keys = [key for key, choice in numbered.items() if choice.name == target.name]
        held = {key: sum(sound(target, page_values.get(key)) for page_values in values) for key in keys}
        winner = next((key for key in keys if held[key] == len(pages)), None)
        if winner is None:
            best = max(held.values(), default=0)
            notes.append(f"{target.name}: not found on this page ({len(keys)} places tried)" if best == 0 else
                         f"{target.name}: no selector gave it on every page (at best {best} of {len(pages)})")
            continue
        if target.type == "price":
            winner = _sale_over_regular(winner, keys, numbered, values)
        elif target.name == "sku":
            winner = _shown_over_hidden(winner, keys, numbered, values, pages, target)
        choice = numbered[winner]
        tried = keys.index(winner)
        if tried:
            choice.why += f" (the {tried} more trusted place{'s' if tried > 1 else ''} gave no sound value)"
        if len(pages) > 1:
            choice.why += f"; held on all {len(pages)} sampled pages"
        chosen.append(choice)
    return chosen, notes


_STRUCTURED_KEYS = ("jsonld", "microdata", "meta")
_SALE_SHARE_MIN = Decimal("0.3")  # a "sale" amount under 30 % of the regular one is an instalment or a deposit


def _sale_over_regular(winner: str, keys: list[str], numbered: dict[str, Choice],
                       values: list[dict[str, Any]]) -> str:
    """The price the page shows by its title as the one to pay now (a sale, current or special price), when
    structured data says a higher one on every page: shops keep the regular price in their markup and show
    the reduced one, and the buyer pays what is shown. Otherwise the more trusted winner stays."""
    spec = numbered[winner].spec
    if not (any(key in spec for key in _STRUCTURED_KEYS) or str(spec.get("css", "")).startswith("[itemprop")):
        return winner
    for key in keys[keys.index(winner) + 1:]:
        if not numbered[key].shown_sale:
            continue
        pairs = [(page_values.get(key), page_values.get(winner)) for page_values in values]
        if all(isinstance(shown, dict) and isinstance(marked, dict) and shown.get("amount") and marked.get("amount")
               and marked["amount"] * _SALE_SHARE_MIN <= shown["amount"] < marked["amount"]
               for shown, marked in pairs):
            numbered[key].why += f" (below the {numbered[winner].why.split(':')[0]}, which keeps the regular price)"
            return key
    return winner


def _shown_over_hidden(winner: str, keys: list[str], numbered: dict[str, Choice], values: list[dict[str, Any]],
                       pages: list[PageData], target: TargetField) -> str:
    """The identifier the page shows (a labelled row, the value its address names it by, an ``itemprop``
    element's text) when the structured winner is written nowhere in the page's text on any sampled page: a
    ``sku`` only the markup holds is often a variant's or a database's id, and the shop's reference is the one
    it shows its customers. The more trusted winner stays when the page shows it too, or nothing shown holds."""
    spec = numbered[winner].spec
    if not (any(key in spec for key in _STRUCTURED_KEYS) or "::attr(content)" in str(spec.get("css", ""))):
        return winner
    texts = [visible_text(page) for page in pages]
    if any(shown_in(text, page_values.get(winner)) for text, page_values in zip(texts, values, strict=True)):
        return winner
    for key in keys[keys.index(winner) + 1:]:
        later = numbered[key].spec
        if any(name in later for name in _STRUCTURED_KEYS) or "::attr(" in str(later.get("css", "")) \
                or str(later.get("xpath", "")).startswith(("//link", "//meta")):
            continue
        if all(sound(target, page_values.get(key)) and shown_in(text, page_values.get(key))
               for text, page_values in zip(texts, values, strict=True)):
            numbered[key].why += (f" (the page shows it, and not the {numbered[winner].why.split(':')[0]}, "
                                  "which it writes nowhere in its text)")
            return key
    return winner


def detect_schema(page: PageData) -> TargetSchema | None:
    """The type the page declares (its JSON-LD or microdata main item), else a product when it has an
    add-to-cart control and a price; None: no target schema fits, the suggestion stays generic."""
    for items in (page.jsonld_items(), page.microdata_items()):
        for item in items:
            types = item.get("@type")
            for name in types if isinstance(types, list) else [types]:
                schema = schema_of_type(re.split(r"[/#:]", name)[-1] if isinstance(name, str) else None)
                if schema is not None:
                    return schema
    price = PRODUCT.field("price")
    availability = PRODUCT.field("availability")
    if price and availability and add_to_cart_control(page.selector) is not None \
            and next(prominent_price(page.selector, price), None):
        return PRODUCT
    return None


def schema_named(name: str) -> TargetSchema:
    return TARGET_SCHEMAS[name]
