"""Selectors evaluated by lxml directly (each expression compiled once) read what parsel reads: elements,
attribute and text nodes, strings, numbers and booleans an expression gives, EXSLT prefixes and XML documents
(both left to parsel), and a text cut to the value cap whatever the cap."""

from __future__ import annotations

from typing import Any

import pytest
from harvester.scraping.extraction.extractor import _compiled, _node_text, extract_record, parse_html
from parsel import Selector

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.unit
URL = "http://127.0.0.1:9/p/1"
HTML = """<html><body>
<h1 class="title main">  Blue   <b>mug</b> </h1>
<span class="sku">SKU-7</span><span class="price">12.50</span>
<a class="tag" href="/t/a">kitchen</a><a class="tag" href="/t/b">blue</a>
<p class="long">""" + "word " * 400 + """</p>
</body></html>"""


def parsel_text(html: str, attribute: dict[str, Any]) -> list[str]:
    """What parsel alone gives for the selector: each matched node's normalised text (the reference)."""
    document = Selector(text=html)
    nodes = document.css(attribute["css"]) if "css" in attribute else document.xpath(attribute["xpath"])
    texts = []
    for node in nodes:
        root = node.root
        text = root if isinstance(root, str) else str(root) if isinstance(root, bool | int | float) else (
            node.xpath("normalize-space(string())").get() or "")
        if " ".join(text.split()):
            texts.append(" ".join(text.split()))
    return texts


@pytest.mark.parametrize("attribute", [
    {"css": "h1.title"}, {"css": "h1::text"}, {"css": "a.tag::attr(href)"}, {"xpath": "//a[@class='tag']/text()"},
    {"xpath": "count(//a)"}, {"xpath": "boolean(//h1)"}, {"xpath": "string(//span[@class='sku'])"},
    {"xpath": "//a[set:distinct(.)]/@href"}, {"xpath": "//*[has-class('price')]"},
])
def test_a_selector_reads_what_parsel_reads(attribute: dict[str, Any]) -> None:
    many = "tag" in attribute.get("css", attribute.get("xpath", "")) or "set:" in attribute.get("xpath", "")
    source = demo_source("http://127.0.0.1:9", attributes={
        "sku": {"css": ".sku"}, "value": {**attribute, "type": "list[str]" if many else "str"}})
    record = extract_record(source, parse_html(HTML, URL), URL).record
    assert record is not None
    expected = parsel_text(HTML, attribute)
    assert record["value"] == (expected if many else expected[0])


def test_exslt_prefixes_are_left_to_parsel_and_expressions_compile_once() -> None:
    assert _compiled("//a[set:distinct(.)]") is None  # parsel registers the prefix, lxml alone would not
    assert _compiled("//a/@href") is _compiled("//a/@href")


def test_a_long_text_is_cut_at_the_limit_whatever_the_limit() -> None:
    """One compiled expression serves every limit (the limit is a variable of it, not part of its text)."""
    paragraph = Selector(text=HTML).css("p.long")[0]
    for limit in (1, 10, 37, 500, 5000):
        expected = paragraph.xpath(f"substring(normalize-space(string()), 1, {limit})").get()
        assert _node_text(paragraph.root, limit) == " ".join((expected or "").split())[:limit]
