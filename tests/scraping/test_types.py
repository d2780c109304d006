"""Types real shops need: locale numbers, exact prices, timezone-aware datetimes, presence, and the
ambiguous ``85.000 €`` that an ``int`` must never read as 85."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from harvester.scraping.extraction.extractor import extract_record, parse_html

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


# -- locale numbers and prices, from real shop strings --------------------------------------------------
@pytest.mark.parametrize(("text", "options", "amount", "currency"), [
    ("1.299,00 €", {}, "1299.00", "EUR"),
    ("$1,299.99", {}, "1299.99", "$"),  # $ alone is ambiguous: kept as written without a hint
    ("$1,299.99", {"currency": "USD"}, "1299.99", "USD"),
    ("$1,299.99", {"locale": "en_CA"}, "1299.99", "CAD"),
    ("CHF 1'299.\u2013", {}, "1299", "CHF"),  # the Swiss ".-" (an en dash) for no cents
    ("¥12,800", {"locale": "ja_JP"}, "12800", "JPY"),
    ("¥12,800", {"currency": "CNY"}, "12800", "CNY"),
    ("85.000 €", {"locale": "de_DE"}, "85000", "EUR"),
    ("1 299,00 zł", {}, "1299.00", "PLN"),
    ("R$ 1.299,90", {}, "1299.90", "BRL"),
    ("19,90", {"currency": "EUR", "decimal_separator": ","}, "19.90", "EUR"),
    ("12.50", {"locale": "de_CH", "currency": "CHF"}, "12.50", "CHF"),
])
def test_prices_are_an_exact_amount_and_a_currency(text: str, options: dict, amount: str, currency: str) -> None:
    from decimal import Decimal

    extraction = _extract({"price": {"css": ".price", "type": "price", **options}}, f"<p class=price>{text}</p>")
    value = extraction.record["price"]
    assert value == {"amount": Decimal(amount), "currency": currency}, value
    assert type(value["amount"]) is Decimal and extraction.problems == []


@pytest.mark.parametrize(("text", "kind", "options", "expected"), [
    ("1.299,00", "float", {"locale": "de_DE"}, 1299.0),
    ("85.000", "int", {"locale": "de_DE"}, 85000),
    ("85.000", "int", {"decimal_separator": ","}, 85000),
    ("85,000", "int", {"locale": "en_US"}, 85000),
    ("1\u202f299,50", "float", {"locale": "fr_FR"}, 1299.5),
    ("1 299,50", "float", {"locale": "fr_FR"}, 1299.5),
    ("1\u2019299.50", "float", {"locale": "de_CH"}, 1299.5),
    ("1,23,456.75", "float", {"locale": "en_IN"}, 123456.75),
    ("85.0", "int", {}, 85),
])
def test_locale_numbers(text: str, kind: str, options: dict, expected: float) -> None:
    extraction = _extract({"n": {"css": ".n", "type": kind, **options}}, f"<p class=n>{text}</p>")
    assert extraction.record["n"] == expected and type(extraction.record["n"]) is type(expected)


@pytest.mark.parametrize(("text", "options"), [
    ("1,299.99", {"locale": "de_DE", "type": "float"}),  # a grouping dot after the decimal comma: not de_DE
    ("85.000", {"type": "int"}), ("85.000 €", {"type": "int"}), ("1.234", {"type": "int"}),
])
def test_numbers_that_could_mean_two_things_are_the_wrong_type(text: str, options: dict) -> None:
    extraction = _extract({"n": {"css": ".n", **options}}, f"<p class=n>{text}</p>")
    assert extraction.record["n"] is None and [p.kind for p in extraction.problems] == ["wrong_type"]


# -- datetimes ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "options", "expected"), [
    ("2024-03-05T10:30:00+02:00", {}, datetime(2024, 3, 5, 8, 30, tzinfo=UTC)),
    ("2024-03-05T10:30:00Z", {}, datetime(2024, 3, 5, 10, 30, tzinfo=UTC)),
    ("2024-03-05 10:30", {}, datetime(2024, 3, 5, 10, 30, tzinfo=UTC)),
    ("2024-03-05 10:30", {"timezone": "Europe/Paris"}, datetime(2024, 3, 5, 9, 30, tzinfo=UTC)),
    ("05.03.2024 10:30", {"format": "%d.%m.%Y %H:%M"}, datetime(2024, 3, 5, 10, 30, tzinfo=UTC)),
    ("03/05/2024 8:15 PM", {}, datetime(2024, 3, 5, 20, 15, tzinfo=UTC)),
    ("03/05/2024 8:15 PM", {"dayfirst": True}, datetime(2024, 5, 3, 20, 15, tzinfo=UTC)),
    ("March 5, 2024, 9:00 am", {"timezone": "America/New_York"}, datetime(2024, 3, 5, 14, 0, tzinfo=UTC)),
])
def test_datetimes_are_timezone_aware(text: str, options: dict, expected: datetime) -> None:
    extraction = _extract({"at": {"css": ".at", "type": "datetime", **options}}, f"<p class=at>{text}</p>")
    value = extraction.record["at"]
    assert value == expected and value.tzinfo is not None, (value, extraction.problems)


@pytest.mark.parametrize("text", ["12", "next tuesday", "05.03.2024 10:30 extra", "x" * 500])
def test_a_datetime_that_is_not_complete_is_the_wrong_type_never_today(text: str) -> None:
    options = {"format": "%d.%m.%Y %H:%M"} if "extra" in text else {}
    extraction = _extract({"at": {"css": ".at", "type": "datetime", **options}}, f"<p class=at>{text}</p>")
    assert extraction.record["at"] is None and [p.kind for p in extraction.problems] == ["wrong_type"]


def test_epoch_numbers_from_json_are_datetimes() -> None:
    from harvester.scraping.extraction.coercion import to_datetime

    assert to_datetime(1709634600) == datetime(2024, 3, 5, 10, 30, tzinfo=UTC)
    assert to_datetime(1709634600000) == datetime(2024, 3, 5, 10, 30, tzinfo=UTC)


# -- present --------------------------------------------------------------------------------------------------
def test_present_is_true_when_the_selector_matches_and_false_otherwise_never_missing() -> None:
    attributes = {"sale": {"css": ".badge-sale", "type": "present"},
                  "new": {"css": ".badge-new", "type": "present"},
                  "limited": {"css": ".badge", "type": "present", "regex": "(?i)limited"}}
    extraction = _extract(attributes, "<span class=badge-sale></span><span class=badge>Limited edition</span>")
    assert extraction.record["sale"] is True and extraction.record["new"] is False
    assert extraction.record["limited"] is True and extraction.problems == []


# -- post-processing --------------------------------------------------------------------------------------
def test_regex_strip_join_and_default_run_before_the_type() -> None:
    attributes = {
        "stock": {"css": ".stock", "type": "int", "regex": r"(\d+) left"},
        "code": {"css": ".code", "strip": "#[] "},
        "all_tags": {"css": "li.tag", "join": ", "},
        "rating": {"css": ".rating", "type": "float", "default": "0"},
        "unmatched": {"css": ".stock", "regex": "never (here)"},
    }
    html = "<p class=stock>Only 12 left!</p><p class=code>[#A-12]</p><li class=tag>a<li class=tag>b"
    extraction = _extract(attributes, html)
    record = extraction.record
    assert (record["stock"], record["code"], record["all_tags"], record["rating"]) == (12, "A-12", "a, b", 0.0)
    assert record["unmatched"] is None
    assert [str(p) for p in extraction.problems] == [
        "unmatched: missing (the selector matched 1 value(s); the regex matched none of them)"]
