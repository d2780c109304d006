"""Extraction: a source's attributes (CSS or XPath through parsel) into a typed record.

The rules of DESIGN.md section 9: a missing or mistyped optional attribute is stored as null and the
gap counted; a missing or mistyped required attribute rejects the record with the reason. Malformed
HTML never raises (lxml repairs it); a selector that cannot be evaluated is a problem, not a crash.

Hostile pages are bounded: a scalar attribute takes the text of its FIRST match only (all of them,
nested in each other, once cost 21 s and 2 GB on a 2 MB page); a value longer than
``max_value_length`` is refused (``too_long``), and once a page has given ``max_page_characters``
characters the rest of its values are refused (``too_large``). Numbers are parsed as decimals, so
integers are exact and range-checked to the int64 MongoDB stores, and ``1.234,56 €`` reads 1234.56.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from parsel import Selector

from harvester.config.model import Attribute, SourceConfig
from harvester.errors import CoercionError
from harvester.urls import canonicalise_url

if TYPE_CHECKING:
    from harvester.settings import HarvesterSettings

# Digits with '.' or ',' between them; a space or apostrophe only before a group of exactly three digits.
_NUMBER = re.compile(r"([-+\u2212]?)(\d+(?:(?:[.,]|[ '\u00a0\u202f](?=\d{3}(?!\d)))\d+)*)")
_GROUP_SEPARATORS = re.compile(r"[ '\u00a0\u202f]")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_TRUE = frozenset({"true", "yes", "y", "1", "on", "in stock", "available"})
_FALSE = frozenset({"false", "no", "n", "0", "off", "out of stock", "unavailable", "sold out"})
_DATE_FORMATS = ("%Y-%m-%d", "%d/%m/%Y", "%d.%m.%Y", "%B %d, %Y", "%d %B %Y", "%b %d, %Y", "%d %b %Y")


@dataclass(frozen=True, slots=True)
class Problem:
    """One gap in a record: ``kind`` is missing or wrong_type; ``required`` ones reject the record."""

    attribute: str
    kind: str
    detail: str
    required: bool = False

    @property
    def counter(self) -> str:
        return f"{self.kind}:{self.attribute}"

    def __str__(self) -> str:
        return f"{self.attribute}: {self.kind} ({self.detail})" + (" [required]" if self.required else "")


@dataclass
class Extraction:
    """A typed record (None when rejected) and the problems found on the way."""

    record: dict[str, Any] | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def rejected_reason(self) -> str | None:
        required = [str(problem) for problem in self.problems if problem.required]
        return "; ".join(required) if required else None


def parse_decimal(text: str, decimal_separator: str | None = None) -> Decimal:
    """The first number in ``text`` as an exact Decimal.

    ``decimal_separator`` "." or "," says which one marks decimals; the other groups thousands.
    Without it: when both appear the last one is the decimal mark (``1.234,56``, ``1,234.56``); a
    lone "," followed by exactly three digits groups thousands (``1,234``), otherwise it is decimal
    (``12,99``); a lone "." is decimal; a separator that appears twice groups thousands.
    """
    match = _NUMBER.search(text)
    if match is None:
        raise CoercionError(f"expected a number, got {text!r}")
    sign, digits = match.group(1), _GROUP_SEPARATORS.sub("", match.group(2))
    separator = decimal_separator
    if separator is None:
        last_dot, last_comma = digits.rfind("."), digits.rfind(",")
        if last_dot >= 0 and last_comma >= 0:
            separator = "." if last_dot > last_comma else ","
        elif last_comma >= 0:
            separator = "," if digits.count(",") == 1 and len(digits) - last_comma - 1 != 3 else "."
        else:
            separator = "." if digits.count(".") == 1 else ","
    grouping = "," if separator == "." else "."
    whole, _, fraction = digits.replace(grouping, "").partition(separator)
    if separator in fraction:
        raise CoercionError(f"expected one decimal mark {separator!r}, got {text!r}")
    try:
        number = Decimal(f"{whole}.{fraction}" if fraction else whole)
    except InvalidOperation:
        raise CoercionError(f"expected a number, got {text!r}") from None
    return -number if sign in ("-", "\u2212") else number


def _to_int(text: str, decimal_separator: str | None = None) -> int:
    number = parse_decimal(text, decimal_separator)
    if number != number.to_integral_value():
        raise CoercionError(f"expected a whole number, got {text!r}")
    value = int(number)
    if not INT64_MIN <= value <= INT64_MAX:
        raise CoercionError(f"{text!r} is outside the 64-bit integer range MongoDB stores")
    return value


def _to_float(text: str, decimal_separator: str | None = None) -> float:
    value = float(parse_decimal(text, decimal_separator))
    if not math.isfinite(value):
        raise CoercionError(f"{text!r} is too large for a float")
    return value


def _to_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise CoercionError(f"expected yes/no or true/false, got {text!r}")


def _to_date(text: str) -> datetime:
    """A date as a UTC midnight datetime: BSON has no bare date type."""
    stripped = text.strip()
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError:
        for pattern in _DATE_FORMATS:
            try:
                moment = datetime.strptime(stripped, pattern)
                break
            except ValueError:
                continue
        else:
            raise CoercionError(f"expected a date, got {text!r}") from None
    if isinstance(moment, date) and not isinstance(moment, datetime):
        moment = datetime(moment.year, moment.month, moment.day)
    return datetime(moment.year, moment.month, moment.day, tzinfo=UTC)


def coerce(text: str, scalar_type: str, page_url: str, decimal_separator: str | None = None) -> Any:
    """One raw string to one typed value, or :class:`CoercionError` naming what was wrong."""
    if scalar_type == "str":
        return text
    if scalar_type == "int":
        return _to_int(text, decimal_separator)
    if scalar_type == "float":
        return _to_float(text, decimal_separator)
    if scalar_type == "bool":
        return _to_bool(text)
    if scalar_type == "date":
        return _to_date(text)
    if scalar_type == "url":
        url = canonicalise_url(text, page_url)
        if url is None:
            raise CoercionError(f"expected an http(s) URL, got {text!r}")
        return url
    raise CoercionError(f"unknown type {scalar_type}")


class _Budget:
    """Characters a page may still give (``too_large`` past it) and the longest one value may be."""

    def __init__(self, max_value_length: int, max_page_characters: int) -> None:
        self.max_value_length = max_value_length
        self.left = max_page_characters


def _node_text(node: Selector, limit: int) -> str:
    """The normalised text of one selected node, at most ``limit`` characters of it (libxml2 cuts it)."""
    root = node.root
    if isinstance(root, str):
        value = root[: limit * 4 + 64]  # whitespace collapses; this bounds the Python copy
    elif isinstance(root, bool | int | float):
        value = str(root)
    else:
        value = node.xpath(f"substring(normalize-space(string()), 1, {limit})").get() or ""
    return " ".join(value.split())[:limit]


def select_values(selector: Selector, attribute: Attribute, first_only: bool = False,
                  budget: _Budget | None = None) -> tuple[list[str], str | None]:
    """The stripped, non-empty strings an attribute selects (elements give their normalised text), and
    why any were refused: ``too_long`` (a value over the cap) or ``too_large`` (the page's budget)."""
    budget = budget or _Budget(_settings().max_value_length, _settings().max_extracted_characters)
    nodes = selector.css(attribute.css) if attribute.css is not None else selector.xpath(attribute.xpath or "")
    values: list[str] = []
    refused: str | None = None
    for node in nodes:
        if budget.left <= 0:
            return values, "too_large"
        value = _node_text(node, min(budget.max_value_length, budget.left) + 1)
        if not value:
            continue
        if len(value) > budget.left:
            return values, "too_large"
        budget.left -= len(value)
        if len(value) > budget.max_value_length:
            refused = "too_long"
        else:
            values.append(value)
        if first_only:
            break
    return values, refused


def _settings() -> HarvesterSettings:
    from harvester.settings import get_settings

    return get_settings()


def parse_html(text: str, url: str) -> Selector:
    return Selector(text=text or "<html></html>", base_url=url)


def extract_record(source: SourceConfig, selector: Selector, url: str, base_url: str | None = None, *,
                   max_value_length: int | None = None, max_page_characters: int | None = None) -> Extraction:
    """Every attribute of the source from one page, typed; ``url`` is always part of the record.

    Relative ``url`` attributes resolve against ``base_url`` (the page after redirects), else ``url``.
    The caps default to the settings ``max_value_length`` and ``max_extracted_characters``.
    """
    base = base_url or url
    record: dict[str, Any] = {"url": url}
    problems: list[Problem] = []
    budget = _Budget(
        max_value_length if max_value_length is not None else _settings().max_value_length,
        max_page_characters if max_page_characters is not None else _settings().max_extracted_characters,
    )
    for name, attribute in source.attributes.items():
        is_list = attribute.type.startswith("list[")
        scalar_type = attribute.type[5:-1] if is_list else attribute.type
        separator = attribute.decimal_separator
        try:
            values, refused = select_values(selector, attribute, first_only=not is_list, budget=budget)
        except ValueError as error:  # an expression lxml/cssselect cannot evaluate
            problems.append(Problem(name, "bad_selector", str(error), attribute.required))
            record[name] = [] if is_list else None
            continue
        if refused is not None:
            detail = (f"a value is longer than {budget.max_value_length:,} characters" if refused == "too_long"
                      else "the page gave more text than the extraction budget allows")
            problems.append(Problem(name, refused, detail, attribute.required and not values))
        if not values:
            if refused is None:
                problems.append(Problem(name, "missing", "the selector matched nothing", attribute.required))
            record[name] = [] if is_list else None
            continue
        if is_list:
            typed, errors = [], []
            for value in values:
                try:
                    typed.append(coerce(value, scalar_type, base, separator))
                except CoercionError as error:
                    errors.append(str(error))
            if errors:
                problems.append(Problem(name, "wrong_type", "; ".join(errors[:3]),
                                        attribute.required and not typed))
            record[name] = typed
            continue
        try:
            record[name] = coerce(values[0], scalar_type, base, separator)
        except CoercionError as error:
            problems.append(Problem(name, "wrong_type", str(error), attribute.required))
            record[name] = None
    extraction = Extraction(record, problems)
    if extraction.rejected_reason is not None:
        extraction.record = None
    return extraction
