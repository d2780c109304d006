"""The shop's identifier of a product, found where the shop shows the identifier its own address uses.

Shops name a product page by its identifier (``/dp/B07FW264WL``, ``/itm/302474151804``, ``/p/1236291.html``),
and show that identifier on the page under a label of their own words ("item number:", "Šifra", "商品編號").
A value shown on the page that is also a token of the page's canonical address is the identifier whatever the
label's language, so no vocabulary is needed; the selector is the label (or the element's stable id), never
the value, so it holds on the site's other pages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import parse_qsl, unquote, urlsplit

from parsel import Selector

from harvester.scraping.extraction import PageData
from harvester.scraping.suggestion.choices import Choice
from harvester.scraping.suggestion.labels import LABEL_MAX, xpath_literal
from harvester.scraping.suggestion.schemas import TargetField

_TOKEN = re.compile(r"[A-Za-z0-9]{4,40}")
# Tokens of an address that name something else: a year (/2020/), a size (50ml, 4x42, 128gb).
_NOT_AN_IDENTIFIER = re.compile(r"^(?:(?:19|20)\d\d|\d+x\d+|\d+(?:ml|cl|l|g|kg|mm|cm|m|gb|tb|mb|w|v|mah|hz|in))$", re.I)
_SHOWN = ("//body//*[text()[normalize-space()]][not(ancestor-or-self::*[self::script or self::style or self::noscript "
          "or self::a or self::option or self::button or self::template])]")


def address_tokens(page: PageData) -> set[str]:
    """The tokens with a digit in the page's canonical address (``link rel=canonical``, ``og:url``, its URL)."""
    addresses = [*page.selector.css("link[rel=canonical]::attr(href)").getall()[:1],
                 *(page.meta().get("og:url") or [])[:1], page.url]
    tokens: set[str] = set()
    for address in addresses:
        parts = urlsplit(address)
        text = unquote(f"{parts.path}?{parts.query}")
        tokens |= {token for token in [*_TOKEN.findall(text), *re.findall(r"\d{4,40}", text)]
                   if len(re.findall(r"\d", token)) >= 3 and not _NOT_AN_IDENTIFIER.match(token)}
    return tokens


def identifier_candidates(page: PageData, target: TargetField) -> Iterator[Choice]:
    """Choices for the elements that show a token of the page's address: by their label, else their id."""
    tokens = address_tokens(page)
    if not tokens:
        return
    seen: set[str] = set()
    for element in page.selector.xpath(_SHOWN)[:20000]:
        value = " ".join(" ".join(element.xpath("text()").getall()).split())
        if len(value) > LABEL_MAX + 40:
            continue
        for token in tokens:
            if re.search(rf"(?<![A-Za-z0-9]){token}(?![A-Za-z0-9])", value) or _written_apart(value, token):
                for choice in _shown(element, value, token, target):
                    if choice.spec["xpath"] not in seen:
                        seen.add(choice.spec["xpath"])
                        yield choice


_SEPARATORS = re.compile(r"[./ -]")


def _written_apart(shown: str, token: str) -> bool:
    """Whether a short text writes the address's identifier in groups ("466/7999", "002.937.72" for 4667999 and
    00293772; "1002/710" for p11002710, where the address puts one or two characters before it)."""
    if not _SEPARATORS.search(shown) or len(shown) > 24 or not re.fullmatch(r"[A-Za-z0-9./ -]+", shown):
        return False
    joined = _SEPARATORS.sub("", shown)
    return len(re.findall(r"\d", joined)) >= 5 and token.endswith(joined) and len(token) - len(joined) <= 2


def _shown(element: Selector, value: str, token: str, target: TargetField) -> Iterator[Choice]:
    tag = element.root.tag
    if not isinstance(tag, str):
        return
    why = f"{target.why}: the page shows it, and the page's address names the product by it"
    whole = element.xpath("normalize-space()").get() or ""
    if whole == token or _written_apart(whole, token):
        # the element's own name first (an id, a data- attribute the template writes): the text beside it may be
        # one product's (a colour), where a name is the template's on every page
        for attribute, named in element.attrib.items():
            if (attribute == "id" or attribute.startswith("data-")) and re.fullmatch(r"[A-Za-z][A-Za-z_-]*", named):
                yield Choice(target.name, {"xpath": f"//{tag}[@{attribute}='{named}']"},
                             f"the {tag} whose {attribute} is {named!r}: {why}")
                break
        label = element.xpath("preceding-sibling::*[1]")
        label_text = label[0].xpath("normalize-space()").get() if label else ""
        if label and label_text and len(label_text) <= LABEL_MAX and not re.search(r"\d{3,}", label_text):
            yield Choice(target.name, {"xpath": f"//{label[0].root.tag}[normalize-space()={xpath_literal(label_text)}]"
                                                f"/following-sibling::{tag}[1]"},
                         f"the value beside the label {label_text!r}: {why}")
        return
    before = value.split(token, 1)[0]
    label = before.strip()
    if label and value.startswith(before) and len(label) <= LABEL_MAX and not re.search(r"\d{3,}", label) \
            and not element.xpath("./*[normalize-space()]"):
        yield Choice(target.name, {"xpath": f"//{tag}[starts-with(normalize-space(), {xpath_literal(label)})]",
                                   "regex": rf"{re.escape(label)}\s*([A-Za-z0-9][\w./-]*[A-Za-z0-9])"},
                     f"the {tag} reading {label!r} and the identifier: {why}")


# Query parameters that carry a product's identifier in shops' addresses (``?pid=260591``, ``?productId=…``).
_ID_PARAMETER = re.compile(r"(?:p|pid|id|item|itemid|item_id|product|productid|product_id|prod|sku|code|art|artnr|"
                           r"articleid|goods_id|goodsid|offerid|variant)", re.I)
_CANONICAL = (("//link[@rel='canonical']/@href", "link rel=canonical"),
              ("//meta[@property='og:url']/@content", "og:url"))


def address_identifier_candidates(page: PageData, target: TargetField) -> Iterator[Choice]:
    """The identifier the page's own canonical address names the product by, when the page shows it nowhere:
    an identifier-named query parameter (``?pid=31337``), else the run of digits that ends or starts the
    address's last segment (``…/hose-reel-green--88412.html``, ``/P-5550123-table-cloth``). The selector reads
    the canonical address and the pattern (RE2: no look-behind) says where in it the number sits, never the
    number, so it holds on the site's other pages; it is the last place tried, after every place the page shows
    an identifier (a shop that shows one knows better than its address)."""
    for expression, name in _CANONICAL:
        found = page.selector.xpath(expression).get()
        if not found:
            continue
        parts = urlsplit(found.strip())
        for key, value in parse_qsl(parts.query):
            if _ID_PARAMETER.fullmatch(key) and re.fullmatch(r"[A-Za-z0-9-]{4,40}", value) \
                    and re.search(r"\d{3}", value):
                yield Choice(target.name, {"xpath": expression, "regex": rf"[?&]{re.escape(key)}=([A-Za-z0-9-]+)"},
                             f"the {name} address's {key}= parameter: {target.why}: the shop names the product by it")
                return
        segment = unquote(parts.path.rstrip("/").rsplit("/", 1)[-1])
        stem = re.sub(r"\.[A-Za-z]{2,5}$", "", segment)
        ending = re.search(r"(?<![A-Za-z0-9])(\d{4,20})$", stem)
        starting = re.match(r"[A-Za-z]{0,3}[-_]?(\d{4,20})(?![A-Za-z0-9])", stem)
        for match, pattern, where in (
                (ending, r"[^A-Za-z0-9](\d{4,20})(?:\.[A-Za-z]{2,5})?/?(?:[?#]|$)", "ends"),
                (starting, r"/[A-Za-z]{0,3}[-_]?(\d{4,20})(?:[-_.][^/?#]*)?/?(?:[?#]|$)", "starts")):
            if match and not _NOT_AN_IDENTIFIER.match(match.group(1)):
                yield Choice(target.name, {"xpath": expression, "regex": pattern},
                             f"the number that {where} the {name} address's last segment: {target.why}: "
                             f"the shop names the product by it")
                return


_VISIBLE_TEXT = ("//body//text()[not(ancestor::script or ancestor::style or ancestor::noscript or ancestor::template "
                 "or ancestor::option)]")


def visible_text(page: PageData) -> str:
    """The text a reader of the page sees (no scripts, styles, templates or attribute values), spaces collapsed."""
    return " ".join(" ".join(page.selector.xpath(_VISIBLE_TEXT).getall()).split())


def shown_in(text: str, value: object) -> bool:
    """Whether an identifier is written in the page's text as a token of its own (not inside a longer one)."""
    if not isinstance(value, str) or not value.strip():
        return False
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(value.strip())}(?![A-Za-z0-9])", text) is not None
