"""Extraction on hostile pages and values: exact integers, decimal commas, bounded work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from harvester.scraping.extraction.extractor import CoercionError, coerce, extract_record, parse_html

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.unit
URL = "http://127.0.0.1:9/product/12"


# -- exact integers -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("1234567890123456789", 1234567890123456789),  # through a float it came back as ...6784
    ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -(2**63)), ("9 007 199 254 740 993", 2**53 + 1),
    ("1,234", 1234), ("12.0", 12),
])
def test_integers_are_parsed_exactly(text: str, expected: int) -> None:
    value = coerce(text, "int", URL)
    assert type(value) is int and value == expected


@pytest.mark.parametrize("text", ["12345678901234567891", "9223372036854775808", "-9223372036854775809"])
def test_integers_outside_int64_are_the_wrong_type(text: str) -> None:
    with pytest.raises(CoercionError, match="64-bit"):
        coerce(text, "int", URL)
    source = demo_source("http://127.0.0.1:9", attributes={"sku": {"css": ".sku"}, "stock": {"css": ".stock",
                                                                                                "type": "int"}})
    extraction = extract_record(source, parse_html(f"<p class=sku>S</p><p class=stock>{text}</p>", URL), URL)
    assert extraction.record is not None and extraction.record["stock"] is None
    assert [problem.counter for problem in extraction.problems] == ["wrong_type:stock"]


# -- decimal separators -------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "separator", "expected"), [
    ("1.234,56 €", None, 1234.56), ("1.234,56 €", ",", 1234.56), ("€ 1,234.50", None, 1234.5),
    ("12,99 €", None, 12.99), ("1 234,5", None, 1234.5), ("1'234.5", None, 1234.5), ("1.234.567", None, 1234567.0),
    ("1.234", ",", 1234.0), ("1,234", ".", 1234.0), ("1,5", ",", 1.5), ("-0,25", ",", -0.25), ("0.1", None, 0.1),
])
def test_numbers_with_either_decimal_separator(text: str, separator: str | None, expected: float) -> None:
    attributes = {"sku": {"css": ".sku"}, "price": {"css": ".price", "type": "float"}}
    if separator is not None:
        attributes["price"]["decimal_separator"] = separator
    source = demo_source("http://127.0.0.1:9", attributes=attributes)
    extraction = extract_record(source, parse_html(f"<p class=sku>S</p><p class=price>{text}</p>", URL), URL)
    assert extraction.record is not None and extraction.record["price"] == pytest.approx(expected, rel=1e-15)


def test_a_decimal_comma_in_an_int_attribute_is_the_wrong_type() -> None:
    source = demo_source("http://127.0.0.1:9", attributes={
        "sku": {"css": ".sku"}, "stock": {"css": ".stock", "type": "int", "decimal_separator": ","}})
    extraction = extract_record(source, parse_html("<p class=sku>S</p><p class=stock>3,5</p>", URL), URL)
    assert extraction.record["stock"] is None and extraction.problems[0].kind == "wrong_type"


def test_decimal_separator_is_only_for_numbers() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="decimal_separator"):
        demo_source("http://127.0.0.1:9", attributes={"sku": {"css": ".sku", "decimal_separator": ","}})


# -- bounded extraction -------------------------------------------------------------------------------
_NESTED_PAGE_RUN = textwrap.dedent("""
    import json, resource, sys, time, tracemalloc
    resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))  # the old code needed 2 GB
    from harvester_demo.app import nested_matches_page
    from harvester.scraping.extraction.extractor import extract_record, parse_html
    from tests.fixtures.demo_site import demo_source
    html = nested_matches_page(2 << 20)
    source = demo_source("http://127.0.0.1:9", attributes={
        "sku": {"css": ".v"}, "words": {"css": ".v", "type": "list[str]"}, "code": {"xpath": "//span/text()"}})
    selector = parse_html(html, "http://127.0.0.1:9/p")
    tracemalloc.start()
    started = time.process_time()
    extraction = extract_record(source, selector, "http://127.0.0.1:9/p")
    seconds = time.process_time() - started
    peak = tracemalloc.get_traced_memory()[1]
    record = extraction.record
    print(json.dumps({"bytes": len(html), "seconds": seconds, "peak": peak,
                      "sku": len(record["sku"] or ""), "words": len(record["words"]), "code": record["code"],
                      "problems": sorted({problem.counter for problem in extraction.problems})}))
""")


def test_a_2_mb_page_of_nested_matches_is_fast_and_small() -> None:
    """One ordinary attribute over this page took 21 s and 2 GB: every nested match's whole text."""
    completed = subprocess.run([sys.executable, "-c", _NESTED_PAGE_RUN], capture_output=True, text=True,
                               timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert completed.returncode == 0, completed.stderr[-2000:]
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    assert figures["bytes"] >= 2 << 20
    assert figures["seconds"] < 10, figures  # generous: well under a second here
    assert figures["peak"] < 64 << 20, figures  # Python memory of the extraction, bytes
    # The scalar is the first match only; too long a value is refused, not cut; the list stops at the page budget.
    assert figures["sku"] == 0 and "too_long:sku" in figures["problems"]
    assert "too_large:words" in figures["problems"] and figures["words"] < 2000
    assert figures["code"] is not None


def test_caps_come_from_arguments_or_settings() -> None:
    source = demo_source("http://127.0.0.1:9", attributes={
        "sku": {"css": ".sku"}, "title": {"css": ".t"}, "tags": {"css": "li", "type": "list[str]"}})
    html = "<p class=sku>S</p><p class=t>" + "x" * 50 + "</p><ul>" + "<li>abcdefghij</li>" * 20 + "</ul>"
    extraction = extract_record(source, parse_html(html, URL), URL, max_value_length=40, max_page_characters=100)
    record = extraction.record
    assert record is not None and record["sku"] == "S" and record["title"] is None
    assert record["tags"] == ["abcdefghij"] * 5  # 1 + 41 examined + 5 x 10; a sixth would pass 100
    assert {problem.counter for problem in extraction.problems} == {"too_long:title", "too_large:tags"}
    roomy = extract_record(source, parse_html(html, URL), URL)
    assert roomy.problems == [] and len(roomy.record["tags"]) == 20
