"""CSS suggestions, where no structured data holds a field: a page's prominent single elements
(``h1``, ``span.price``, ``time``, images, links) and its repeated lists."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from parsel import Selector

from harvester.scraping.suggestion.choices import Choice, field_name, infer_type

TEXT_MAX = 200


def css_of(node: Selector) -> str | None:
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
        css = css_of(node)
        if css is None or (css.split(".")[0] in ("nav", "footer", "script", "style", "body", "html", "main", "ul",
                                                 "ol", "article", "section", "div") and not relative):
            continue
        counts[css] += 1
        nodes[css].append(node)
    headings = scope.xpath(".//h1") if not relative else []
    if len(headings) == 1 and not css_of(headings[0]):
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
