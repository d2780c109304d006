"""The coerce stage of extraction: one selected value (page text, or a JSON value) into one typed value.

Numbers are exact: parsed as decimals, integers range-checked to the int64 MongoDB stores. A number
whose separators could mean two things is refused rather than guessed (``85.000 €`` as an ``int`` is
85 or 85000: ``wrong_type`` until ``decimal_separator`` or ``locale`` says which). Prices are an
exact amount and an ISO 4217 currency (price-parser finds them in shop strings); datetimes are
timezone-aware (UTC when the text names no offset and the attribute no ``timezone``); dates without
a ``format`` that dateutil cannot read completely (a year, a month and a day) are refused, never
filled in from today.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, date, datetime, tzinfo
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from harvester.config import Attribute
from harvester.errors import CoercionError
from harvester.urls import canonicalise_url

# Digits with '.' or ',' between them; a space or apostrophe only before a group of exactly three digits.
_NUMBER = re.compile(r"([-+\u2212]?)(\d+(?:(?:[.,]|[ '\u00a0\u202f\u2019](?=\d{3}(?!\d)))\d+)*)")
_GROUP_SEPARATORS = re.compile(r"[ '\u00a0\u202f\u2019]")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_TRUE = frozenset({"true", "yes", "y", "1", "on", "in stock", "available", "instock", "limitedavailability",
                   "onlineonly", "instoreonly"})
_FALSE = frozenset({"false", "no", "n", "0", "off", "out of stock", "unavailable", "sold out", "outofstock",
                    "soldout", "discontinued"})
_DATE_FORMATS = ("%Y-%m-%d", "%d/%m/%Y", "%d.%m.%Y", "%B %d, %Y", "%d %B %Y", "%b %d, %Y", "%d %b %Y")
MAX_DATE_TEXT = 120  # longer text is not a date; dateutil's tokenizer never sees it
# Currency symbols price-parser reports, as ISO 4217 codes; the ambiguous ones ($, ¥, kr) need a hint.
_CURRENCY_SYMBOLS = {
    "€": "EUR", "eur": "EUR", "£": "GBP", "₹": "INR", "rs": "INR", "rs.": "INR", "₩": "KRW", "₽": "RUB",
    "\u0440\u0443\u0431": "RUB",
    "zł": "PLN", "₺": "TRY", "r$": "BRL", "₪": "ILS", "₫": "VND", "฿": "THB", "₱": "PHP", "us$": "USD",
    "c$": "CAD", "ca$": "CAD", "a$": "AUD", "au$": "AUD", "hk$": "HKD", "s$": "SGD", "nz$": "NZD", "kč": "CZK",
    "ft": "HUF", "lei": "RON", "rm": "MYR", "fr.": "CHF", "sfr.": "CHF", "₴": "UAH", "₦": "NGN", "円": "JPY",
    "元": "CNY", "\u043b\u0432": "BGN", "kn": "HRK",
}
_PLAIN_DECIMAL = re.compile(r"^-?\d+(?:\.\d+)?$")
_AMBIGUOUS_SYMBOLS = frozenset({"$", "¥", "￥", "kr", "kr."})


def parse_decimal(text: str, decimal_separator: str | None = None, *, integer: bool = False) -> Decimal:
    """The first number in ``text`` as an exact Decimal.

    ``decimal_separator`` "." or "," says which one marks decimals; the other groups thousands (and
    may only stand before the decimal mark). Without it: when both appear the last one is the decimal
    mark (``1.234,56``, ``1,234.56``); a lone "," followed by exactly three digits groups thousands
    (``1,234``), otherwise it is decimal (``12,99``); a lone "." is decimal; a separator that appears
    twice groups thousands. ``integer``: a lone "." followed by exactly three digits (``85.000``) is
    85 or 85000 and is refused; a decimal reading would silently drop three zeros.
    """
    match = _NUMBER.search(text)
    if match is None:
        raise CoercionError(f"expected a number, got {_short(text)}")
    sign, digits = match.group(1), _GROUP_SEPARATORS.sub("", match.group(2))
    separator = decimal_separator
    if separator is None:
        last_dot, last_comma = digits.rfind("."), digits.rfind(",")
        if last_dot >= 0 and last_comma >= 0:
            separator = "." if last_dot > last_comma else ","
        elif last_comma >= 0:
            separator = "," if digits.count(",") == 1 and len(digits) - last_comma - 1 != 3 else "."
        else:
            if integer and digits.count(".") == 1 and len(digits) - last_dot - 1 == 3:
                raise CoercionError(f"{_short(text)} is ambiguous: is '.' a decimal mark or a thousands separator? "
                                    "Set decimal_separator (or locale) on the attribute")
            separator = "." if digits.count(".") == 1 else ","
    grouping = "," if separator == "." else "."
    mark = digits.find(separator)
    if mark >= 0 and grouping in digits[mark:]:
        raise CoercionError(f"expected {grouping!r} only before the decimal mark {separator!r}, got {_short(text)}")
    whole, _, fraction = digits.replace(grouping, "").partition(separator)
    if separator in fraction:
        raise CoercionError(f"expected one decimal mark {separator!r}, got {_short(text)}")
    try:
        number = Decimal(f"{whole}.{fraction}" if fraction else whole)
    except InvalidOperation:
        raise CoercionError(f"expected a number, got {_short(text)}") from None
    return -number if sign in ("-", "\u2212") else number


@lru_cache(maxsize=256)
def locale_decimal_symbol(locale: str) -> str:
    """The decimal mark of a locale (babel's CLDR data): ``,`` for de_DE, ``.`` for de_CH and en_US."""
    from babel.numbers import get_decimal_symbol

    symbol = get_decimal_symbol(locale)
    return "," if symbol in (",", "\u066b") else "."


def _separator(attribute: Attribute | None, decimal_separator: str | None = None) -> str | None:
    if attribute is None:
        return decimal_separator
    if attribute.locale is not None:
        return locale_decimal_symbol(attribute.locale)
    return attribute.decimal_separator


def _number_text(value: Any, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise CoercionError(f"expected {what}, got {_describe(value)}")
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


def to_int(value: Any, decimal_separator: str | None = None) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = Decimal(value)
    elif isinstance(value, float) and math.isfinite(value):
        number = Decimal(repr(value))
    else:
        text = _number_text(value, "a whole number")
        number = parse_decimal(text, decimal_separator, integer=True)
    if number != number.to_integral_value():
        raise CoercionError(f"expected a whole number, got {_short(value)}")
    result = int(number)
    if not INT64_MIN <= result <= INT64_MAX:
        raise CoercionError(f"{_short(value)} is outside the 64-bit integer range MongoDB stores")
    return result


def to_float(value: Any, decimal_separator: str | None = None) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        result = float(value)
    else:
        result = float(parse_decimal(_number_text(value, "a number"), decimal_separator))
    if not math.isfinite(result):
        raise CoercionError(f"{_short(value)} is too large for a float")
    return result


def to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    lowered = _number_text(value, "yes/no or true/false").strip().lower()
    if lowered.startswith(("http://schema.org/", "https://schema.org/", "schema:")):
        lowered = re.split(r"[/:]", lowered)[-1]  # schema.org availability: InStock, OutOfStock...
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise CoercionError(f"expected yes/no or true/false, got {_short(value)}")


def _zone(attribute: Attribute | None) -> tzinfo:
    if attribute is None or attribute.timezone is None:
        return UTC
    from zoneinfo import ZoneInfo

    return ZoneInfo(attribute.timezone)


def _complete_parse(text: str, dayfirst: bool) -> datetime:
    """dateutil's reading of ``text``, refused when it left the year, month or day to its defaults."""
    from dateutil import parser

    try:
        first = parser.parse(text, dayfirst=dayfirst, default=datetime(2000, 1, 1))
        second = parser.parse(text, dayfirst=dayfirst, default=datetime(2001, 2, 2))
    except (ValueError, OverflowError, TypeError) as error:
        raise CoercionError(f"expected a date, got {_short(text)} ({error})") from None
    if (first.year, first.month, first.day) != (second.year, second.month, second.day):
        raise CoercionError(f"expected a full date (year, month and day), got {_short(text)}")
    return first


def _moment(value: Any, attribute: Attribute | None, what: str) -> datetime:
    """A datetime from text (the attribute's format, ISO 8601, the usual shop formats, then dateutil)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and what == "datetime":
        seconds = float(value) / 1000 if abs(value) > 1e11 else float(value)  # epoch milliseconds or seconds
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            raise CoercionError(f"{_short(value)} is not a time since the epoch") from None
    text = _number_text(value, f"a {what}").strip()
    if len(text) > MAX_DATE_TEXT:
        raise CoercionError(f"expected a {what}, got {len(text):,} characters")
    if attribute is not None and attribute.format is not None:
        try:
            return datetime.strptime(text, attribute.format)
        except ValueError:
            raise CoercionError(f"expected a {what} in the format {attribute.format!r}, got {_short(text)}") from None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    for pattern in _DATE_FORMATS:
        try:
            return datetime.strptime(text, pattern)
        except ValueError:
            continue
    return _complete_parse(text, bool(attribute and attribute.dayfirst))


def to_date(value: Any, attribute: Attribute | None = None) -> datetime:
    """A date as a UTC midnight datetime: BSON has no bare date type."""
    moment = _moment(value, attribute, "date")
    if isinstance(moment, date) and not isinstance(moment, datetime):
        moment = datetime(moment.year, moment.month, moment.day)
    return datetime(moment.year, moment.month, moment.day, tzinfo=UTC)


def to_datetime(value: Any, attribute: Attribute | None = None) -> datetime:
    """A timezone-aware moment, in UTC (as MongoDB stores it); text without an offset is read in the
    attribute's ``timezone`` (default UTC)."""
    moment = _moment(value, attribute, "datetime")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_zone(attribute))
    return moment.astimezone(UTC)


def currency_code(found: str | None, attribute: Attribute | None) -> str | None:
    """An ISO 4217 code for what price-parser found: a code as it is, an unambiguous symbol mapped, an
    ambiguous one ($, ¥, kr) from the attribute's ``currency`` or its locale's territory; else the symbol."""
    hint = attribute.currency if attribute is not None else None
    if not found:
        return hint
    symbol = found.strip()
    if re.fullmatch(r"[A-Z]{3}", symbol):
        return symbol
    mapped = _CURRENCY_SYMBOLS.get(symbol.lower())
    if mapped is not None:
        return mapped
    if hint is not None:
        return hint
    if attribute is not None and attribute.locale is not None:
        territory_currency = _territory_currency(attribute.locale, symbol)
        if territory_currency is not None:
            return territory_currency
    return symbol


@lru_cache(maxsize=256)
def _territory_currency(locale: str, symbol: str) -> str | None:
    """The currency of the locale's territory when the locale writes it with ``symbol`` (¥ in ja_JP: JPY)."""
    from babel import Locale
    from babel.numbers import get_currency_symbol, get_territory_currencies

    territory = Locale.parse(locale).territory
    if not territory:
        return None
    for code in get_territory_currencies(territory):
        if get_currency_symbol(code, locale=locale).replace("\uffe5", "\u00a5") == symbol.replace("\uffe5", "\u00a5"):
            return code
    return None


def to_price(value: Any, attribute: Attribute | None = None) -> dict[str, Any]:
    """``{"amount": Decimal, "currency": "EUR"}`` from a shop string (price-parser), a number, or an
    offer object (schema.org ``price`` + ``priceCurrency``, or ``amount`` + ``currency``)."""
    from price_parser import Price

    if isinstance(value, list) and value:
        value = value[0]  # offers: [{...}, ...]: the first offer
    if isinstance(value, dict):
        amount = value.get("price", value.get("amount", value.get("lowPrice")))
        found = value.get("priceCurrency", value.get("currency"))
        if amount is None:
            raise CoercionError(f"expected a price, got an object without price or amount ({_keys(value)})")
        if isinstance(amount, str) and _PLAIN_DECIMAL.match(amount):
            parsed = {"amount": Decimal(amount), "currency": None}  # schema.org: a plain number, "." decimal
        else:
            parsed = to_price(amount, attribute)
        currency = currency_code(found if isinstance(found, str) else None, attribute) or parsed["currency"]
        return {"amount": parsed["amount"], "currency": currency}
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise CoercionError(f"{_short(value)} is not a price")
        return {"amount": Decimal(repr(value)) if isinstance(value, float) else Decimal(value),
                "currency": currency_code(None, attribute)}
    text = _number_text(value, "a price")
    separator = _separator(attribute)
    price = Price.fromstring(text, decimal_separator=separator)
    if price.amount is None:
        raise CoercionError(f"expected a price, got {_short(text)}")
    return {"amount": price.amount, "currency": currency_code(price.currency, attribute)}


def to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return repr(value) if isinstance(value, float) else str(value)
    raise CoercionError(f"expected text, got {_describe(value)} (select a field inside it)")


def coerce_value(value: Any, scalar_type: str, page_url: str, attribute: Attribute | None = None,
                 decimal_separator: str | None = None) -> Any:
    """One selected value to one typed value, or :class:`CoercionError` naming what was wrong."""
    if scalar_type == "str":
        return to_text(value)
    if scalar_type == "int":
        return to_int(value, _separator(attribute, decimal_separator))
    if scalar_type == "float":
        return to_float(value, _separator(attribute, decimal_separator))
    if scalar_type == "price":
        return to_price(value, attribute)
    if scalar_type == "bool":
        return to_bool(value)
    if scalar_type == "date":
        return to_date(value, attribute)
    if scalar_type == "datetime":
        return to_datetime(value, attribute)
    if scalar_type == "url":
        text = to_text(value).strip()
        url = canonicalise_url(text, page_url)
        if url is None:
            raise CoercionError(f"expected an http(s) URL, got {_short(text)}")
        return url
    raise CoercionError(f"unknown type {scalar_type}")


def coerce(text: str, scalar_type: str, page_url: str, decimal_separator: str | None = None) -> Any:
    """One raw string to one typed value (the attribute's options at their defaults)."""
    return coerce_value(text, scalar_type, page_url, None, decimal_separator)


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)[:limit + 1] \
        if isinstance(value, dict | list) else str(value)
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"an object ({_keys(value)})"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if value is None:
        return "null"
    return _short(value)


def _keys(value: dict[str, Any]) -> str:
    keys = list(value)[:6]
    return "keys " + ", ".join(map(str, keys)) + (", …" if len(value) > 6 else "")
