"""Issue 22's richer types: locale numbers, exact prices, timezone-aware datetimes, presence, and the
ambiguous ``85.000 €`` that an ``int`` must never read as 85."""

from __future__ import annotations

import pytest
from harvester.scraping.extraction import extract_record, parse_html

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.unit
URL = "http://127.0.0.1:9/product/12"


def _extract(attributes: dict, html: str):
    source = demo_source("http://127.0.0.1:9", attributes={"sku": {"css": ".sku"}, **attributes})
    return extract_record(source, parse_html(f"<p class=sku>S</p>{html}", URL), URL)


def test_85_000_euros_as_an_int_without_a_separator_is_the_wrong_type_never_85() -> None:
    extraction = _extract({"price": {"css": ".price", "type": "int"}}, "<p class=price>85.000 €</p>")
    assert extraction.record is not None
    assert extraction.record["price"] is None, "85.000 read as 85: a thousands separator taken for a decimal mark"
    assert [problem.counter for problem in extraction.problems] == ["wrong_type:price"]
    assert "decimal_separator" in extraction.problems[0].detail
