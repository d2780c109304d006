"""The amount a page shows in its largest type, read from the page's own styles without a browser.

Shops of the older, template kind mark their price with no class or id that says "price": a
``<span style="font:bold 27px Verdana">294</span>`` after the title, or a ``.deal span { font-size: 45px }``
rule in a ``<style>`` block. What marks it is its size: the price a buyer pays is the amount a page prints
biggest, bigger than the crossed-out, instalment and per-unit amounts around it. A browser would compute each
element's size; the page's inline styles, ``<font size>`` and its ``<style>`` rules give the same size for
these pages, in a few milliseconds, so `harvester suggest` on plain HTML stays fast (style sheets the page links
to are not fetched: a site whose sizes live only there is left to the other places a price is said).

Each element's size is found as the cascade finds it, for the few elements that read as an amount and their
ancestors only: its inline ``style``, else its most specific matching rule (the later one on a tie), else its
``<font size>`` or heading's default, else its parent's size (``em`` and ``%`` relative to the parent's).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from parsel import Selector

from harvester.scraping.suggestion.choices import Choice
from harvester.scraping.suggestion.labels import (
    STRUCK,
    among_other_products,
    several_amounts,
    title_heading,
    xpath_literal,
)
from harvester.scraping.suggestion.schemas import TargetField

ROOT_SIZE = 16.0  # CSS pixels: a browser's default
LARGE_TYPE_MIN = 20.0  # a size above body text (browsers' 16 px, shops' 12-14 px): print meant to stand out
AMOUNT_MAX = 24  # characters of an element that reads as an amount ("NT$ 2,320 元"), and no more
CANDIDATES_MAX = 80
_FONT_SIZES = {"1": 10.0, "2": 13.0, "3": 16.0, "4": 18.0, "5": 24.0, "6": 32.0, "7": 48.0}  # <font size>
_TAG_SCALE = {"h1": 2.0, "h2": 1.5, "h3": 1.17, "h5": 0.83, "h6": 0.67, "small": 0.83, "big": 1.2}
_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")
_SIZE = re.compile(r"(?:^|;)\s*font(?:-size)?\s*:[^;]*?(?<![\w.-])(\d+(?:\.\d+)?)(px|pt|em|rem|%)", re.I)
_AMOUNT_TEXT = re.compile(r"^\D{0,6}\d[\d\s.,'\u00a0\u202f]*\D{0,6}$")
_COMPOUND_KEY = re.compile(r"#([\w-]+)|\.([\w-]+)|^([a-zA-Z][\w-]*)")


def _size(declarations: str, parent: float) -> float | None:
    """The font size a declaration block sets, in pixels, from the parent's size; None: it sets none."""
    found = _SIZE.search(declarations)
    if found is None:
        return None
    number, unit = float(found.group(1)), found.group(2).lower()
    return {"px": number, "pt": number * 4 / 3, "em": number * parent, "rem": number * ROOT_SIZE,
            "%": number * parent / 100}[unit]


def _specificity(selector: str) -> tuple[int, int, int]:
    ids = len(re.findall(r"#[\w-]", selector))
    classes = len(re.findall(r"\.[\w-]|\[", selector))
    tags = len(re.findall(r"(?:^|[\s>+~])[a-zA-Z]", selector))
    return ids, classes, tags


def _key(selector: str) -> str:
    """What the selector's last compound names (``#id``, ``.class`` or a tag): an element lacking it cannot match."""
    last = re.split(r"[\s>+~]+", selector.strip())[-1]
    found = _COMPOUND_KEY.search(last)
    if found is None:
        return "*"
    element_id, name, tag = found.groups()
    return f"#{element_id}" if element_id else f".{name}" if name else tag.lower()


def _keys(node: Any) -> set[str]:
    keys = {node.tag.lower(), "*"} if isinstance(node.tag, str) else set()
    if node.get("id"):
        keys.add(f"#{node.get('id')}")
    keys.update(f".{name}" for name in (node.get("class") or "").split())
    return keys


class TypeSizes:
    """Font sizes of a page's elements from its inline styles and ``<style>`` rules, found on demand."""

    def __init__(self, document: Selector, nodes: list[Any]) -> None:
        self.document = document
        self.sizes: dict[Any, float] = {}
        self.ruled: dict[Any, tuple[tuple[int, int, int], int, str, str]] = {}  # element: its winning rule
        wanted = set().union(*(_keys(each) for node in nodes for each in (node, *node.iterancestors())))
        text = re.sub(r"/\*.*?\*/", "", " ".join(document.xpath("//style/text()").getall()), flags=re.S)
        for order, (selectors, declarations) in enumerate(_RULE.findall(text)):
            if _SIZE.search(declarations) is None or "@" in selectors:
                continue
            for selector in (one.strip() for one in selectors.split(",")):
                if not selector or ":" in selector or _key(selector) not in wanted:
                    continue  # states (:hover) and pseudo-elements are not what the page shows at rest
                try:
                    matched = document.css(selector)
                except ValueError:  # a selector cssselect cannot read: a browser would skip it too
                    continue
                rank = (_specificity(selector), order, selector, declarations)
                for element in matched:
                    if element.root not in self.ruled or rank[:2] >= self.ruled[element.root][:2]:
                        self.ruled[element.root] = rank

    def size(self, node: Any) -> float:
        if node in self.sizes:
            return self.sizes[node]
        parent = node.getparent()
        inherited = self.size(parent) if parent is not None else ROOT_SIZE
        tag = node.tag.lower() if isinstance(node.tag, str) else ""
        own = _size(node.get("style") or "", inherited)
        if own is None and node in self.ruled:
            own = _size(self.ruled[node][3], inherited)
        if own is None and tag == "font" and (node.get("size") or "").strip() in _FONT_SIZES:
            own = _FONT_SIZES[node.get("size").strip()]
        if own is None:
            own = inherited * _TAG_SCALE.get(tag, 1.0)
        self.sizes[node] = own
        return own

    def hook(self, node: Any) -> str | None:
        """A selector for the element by what sets its size (its style, its rule), the element's own or the
        nearest ancestor's with the element's tag after it: what the template writes on each of its pages."""
        for sized in (node, *node.iterancestors()):
            step = "" if sized is node else f"//{node.tag}"
            if _size(sized.get("style") or "", ROOT_SIZE) is not None:
                return f"//{sized.tag}[@style={xpath_literal(sized.get('style'))}]{step}"
            if sized in self.ruled and _size(self.ruled[sized][3], ROOT_SIZE) is not None:
                css = self.ruled[sized][2]
                return css if sized is node else f"{css} {node.tag}"
            if sized.tag == "font" and sized.get("size"):
                return f"//font[@size={xpath_literal(sized.get('size'))}]{step}"
        return None


def _amount_elements(document: Selector) -> list[Selector]:
    """Elements after the title whose own text reads as one amount and that are not struck through (nor a
    superscript: the cents or a footnote of an amount, never a whole one)."""
    heading = title_heading(document)
    scope = "following::*" if heading is not None else "//body//*"
    found = []
    for node in (heading if heading is not None else document).xpath(
            f"{scope}[not(self::script or self::style or self::option or self::noscript or self::sup or self::sub)]"
            "[text()[normalize-space()]]")[:6000]:
        own = " ".join("".join(node.xpath("text()").getall()).split())
        if not (own and len(own) <= AMOUNT_MAX and _AMOUNT_TEXT.match(own)) or several_amounts(own) \
                or node.xpath(STRUCK):
            continue
        if re.sub(r"\D", "", node.xpath("string()").get() or "") != re.sub(r"\D", "", own):
            continue  # digits in its children too ("173<sup>34</sup>"): what it reads whole is not what it shows
        found.append(node)
        if len(found) == CANDIDATES_MAX:
            break
    return found


def largest_type_price(document: Selector, target: TargetField) -> Iterator[Choice]:
    """The amount in the page's largest type after its title, when that type is large (above body text) and no
    other amount shares its size: the price, as a reader sees it. Amounts in a widget of other products (a
    carousel, "related") do not vote; they are looked for from the largest down, since that look is slow. Its
    selector must find that very element first."""
    nodes = _amount_elements(document)
    if not nodes:
        return
    sizes = TypeSizes(document, [node.root for node in nodes])
    ranked = sorted(((sizes.size(node.root), index) for index, node in enumerate(nodes)), reverse=True)
    ranked = [(size, index) for size, index in ranked if size >= LARGE_TYPE_MIN]
    voting = []
    for size, index in ranked:
        if voting and size < voting[0][0]:
            break
        if not among_other_products(nodes[index]):
            voting.append((size, index))
    texts = {" ".join("".join(nodes[index].xpath("text()").getall()).split()) for _, index in voting}
    if len(texts) != 1:
        return  # no large type, or two amounts in it: no vote
    largest, index = voting[0]
    node = nodes[index]
    hook = sizes.hook(node.root)
    if hook is None:
        return
    first = document.xpath(hook) if hook.startswith("//") else document.css(hook)
    if not first or first[0].root is not node.root:
        return
    kind = "xpath" if hook.startswith("//") else "css"
    yield Choice(target.name, {kind: hook, "type": "price"},
                 f"the amount in the page's largest type after its title ({largest:g} px, set by its style): "
                 f"{target.why}")
