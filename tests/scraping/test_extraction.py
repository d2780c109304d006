"""Extraction into typed records: every attribute type, missing and mistyped values, malformed HTML."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from harvester.scraping.extraction.extractor import CoercionError, coerce, extract_record, parse_html
from harvester_demo.app import page, product_body, product_facts

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.unit
URL = "http://127.0.0.1:9/product/12"


def test_every_attribute_type_matches_the_truth() -> None:
    source = demo_source("http://127.0.0.1:9")
    facts = product_facts(12)
    extraction = extract_record(source, parse_html(page("p", product_body(12)), URL), URL)
    record = extraction.record
    assert record is not None
    assert record["url"] == URL
    assert record["sku"] == facts["sku"]
    assert record["title"] == facts["title"]
    assert record["price"] == facts["price"]
    assert record["stock"] == facts["stock"]
    assert record["in_stock"] is facts["in_stock"]
    assert record["released"] == datetime.combine(facts["released"], datetime.min.time(), UTC)
    assert record["image"] == "http://127.0.0.1:9/static/img/12.png"
    assert record["tags"] == facts["tags"]
    assert record["ratings"] == facts["ratings"]
    assert record["description"] == facts["description"]


def test_missing_optional_is_null_and_reported() -> None:
    source = demo_source("http://127.0.0.1:9")
    extraction = extract_record(source, parse_html(page("p", product_body(10)), URL), URL)
    assert extraction.record is not None and extraction.record["description"] is None
    assert [problem.counter for problem in extraction.problems] == ["missing:description"]
    assert extraction.rejected_reason is None


def test_missing_required_rejects_with_the_reason() -> None:
    source = demo_source("http://127.0.0.1:9")
    extraction = extract_record(source, parse_html("<html><h1 class='title'>x</h1></html>", URL), URL)
    assert extraction.record is None
    assert "sku: missing" in (extraction.rejected_reason or "")


def test_wrong_type_is_null_and_counted_or_rejects_when_required() -> None:
    html = page("w", product_body(3, price_text="N/A", stock_text="lots"))
    source = demo_source("http://127.0.0.1:9")
    extraction = extract_record(source, parse_html(html, URL), URL)
    assert extraction.record is not None
    assert extraction.record["price"] is None and extraction.record["stock"] is None
    assert {problem.counter for problem in extraction.problems} == {"wrong_type:price", "wrong_type:stock"}
    strict = demo_source("http://127.0.0.1:9", attributes={
        "sku": {"css": ".sku"}, "price": {"css": ".price", "type": "float", "required": True}})
    rejected = extract_record(strict, parse_html(html, URL), URL)
    assert rejected.record is None and "price: wrong_type" in (rejected.rejected_reason or "")


def test_malformed_html_still_yields_what_is_there() -> None:
    facts = product_facts(5)
    html = (f"<html><head><title>Broken</title><body><div class=product><h1 class=title>{facts['title']}"
            f"<span class=sku>{facts['sku']}</span><span class=price>€ {facts['price']}</span>"
            "<ul class=tags><li class=tag>a"
            "<li class=tag>b</ul> &bogus; <<<>>")
    source = demo_source("http://127.0.0.1:9")
    extraction = extract_record(source, parse_html(html, URL), URL)
    assert extraction.record is not None
    assert extraction.record["sku"] == facts["sku"]
    assert extraction.record["price"] == facts["price"]
    assert extraction.record["tags"] == ["a", "b"]


@pytest.mark.parametrize(("text", "kind", "expected"), [
    ("1,234", "int", 1234), ("€ 1,234.50", "float", 1234.5), ("-3", "int", -3), ("Yes", "bool", True),
    ("out of stock", "bool", False), ("2024-03-05", "date", datetime(2024, 3, 5, tzinfo=UTC)),
    ("05/03/2024", "date", datetime(2024, 3, 5, tzinfo=UTC)), ("/a b", "url", "http://127.0.0.1:9/a%20b"),
])
def test_coercion(text: str, kind: str, expected: object) -> None:
    assert coerce(text, kind, URL) == expected


@pytest.mark.parametrize(("text", "kind"), [("N/A", "float"), ("1.5", "int"), ("maybe", "bool"),
                                            ("someday", "date"), ("mailto:a@b.c", "url")])
def test_coercion_errors_name_the_value(text: str, kind: str) -> None:
    with pytest.raises(CoercionError, match="expected"):
        coerce(text, kind, URL)


@pytest.mark.parametrize(("option", "values", "expected"), [
    ({"regex": r"(\d+)"}, [" a1 ", ""], ["1"]),
    ({"strip": True}, [" a1 ", ""], ["a1"]),
    ({"strip": ""}, [" a1 ", ""], [" a1 "]),  # strips no character, yet drops the empty value
    ({"join": "|"}, [" a1 ", "b"], [" a1 |b"]),
    ({"default": "none"}, [], ["none"]),
])
def test_an_attribute_skips_post_processing_only_when_no_option_could_change_its_values(
        option: dict[str, object], values: list[str], expected: list[str]) -> None:
    """The stage's conditions are read once a page (``AttributeFacts``): an option that changes values is never
    skipped, and an attribute without one keeps its values as the stage would."""
    from harvester.config import Attribute
    from harvester.scraping.extraction.extractor import AttributeFacts, post_process

    plain = Attribute.model_validate({"json": "name"})
    configured = Attribute.model_validate({"json": "name", **option})

    assert not AttributeFacts.of(plain).post_processes and post_process(plain, values) == values
    assert AttributeFacts.of(configured).post_processes and post_process(configured, values) == expected
