"""Extraction: a source's attributes (CSS or XPath through parsel) into a typed record.

The rules of DESIGN.md section 9: a missing or mistyped optional attribute is stored as null and the
gap counted; a missing or mistyped required attribute rejects the record with the reason. Malformed
HTML never raises (lxml repairs it); a selector that cannot be evaluated is a problem, not a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from parsel import Selector

from harvester.config.model import Attribute, SourceConfig
from harvester.urls import canonicalise_url

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:[ ,\u00a0\u202f]\d{3})+|\d+)(?:\.\d+)?")
_TRUE = frozenset({"true", "yes", "y", "1", "on", "in stock", "available"})
_FALSE = frozenset({"false", "no", "n", "0", "off", "out of stock", "unavailable", "sold out"})
_DATE_FORMATS = ("%Y-%m-%d", "%d/%m/%Y", "%d.%m.%Y", "%B %d, %Y", "%d %B %Y", "%b %d, %Y", "%d %b %Y")


class CoercionError(ValueError):
    """A value is present but not of the attribute's type."""


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


def _to_int(text: str) -> int:
    number = _to_float(text)
    if not number.is_integer():
        raise CoercionError(f"expected a whole number, got {text!r}")
    return int(number)


def _to_float(text: str) -> float:
    match = _NUMBER.search(text)
    if match is None:
        raise CoercionError(f"expected a number, got {text!r}")
    return float(re.sub(r"[ ,\u00a0\u202f]", "", match.group(0)))


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


def coerce(text: str, scalar_type: str, page_url: str) -> Any:
    """One raw string to one typed value, or :class:`CoercionError` naming what was wrong."""
    if scalar_type == "str":
        return text
    if scalar_type == "int":
        return _to_int(text)
    if scalar_type == "float":
        return _to_float(text)
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


def select_values(selector: Selector, attribute: Attribute) -> list[str]:
    """The stripped, non-empty strings an attribute selects; elements give their normalised text."""
    nodes = selector.css(attribute.css) if attribute.css is not None else selector.xpath(attribute.xpath or "")
    values = []
    for node in nodes:
        if isinstance(node.root, str):
            value = node.root
        elif isinstance(node.root, bool | int | float):
            value = str(node.root)
        else:
            value = node.xpath("normalize-space(string())").get() or ""
        value = " ".join(value.split())
        if value:
            values.append(value)
    return values


def parse_html(text: str, url: str) -> Selector:
    return Selector(text=text or "<html></html>", base_url=url)


def extract_record(source: SourceConfig, selector: Selector, url: str, base_url: str | None = None) -> Extraction:
    """Every attribute of the source from one page, typed; ``url`` is always part of the record.

    Relative ``url`` attributes resolve against ``base_url`` (the page after redirects), else ``url``.
    """
    base = base_url or url
    record: dict[str, Any] = {"url": url}
    problems: list[Problem] = []
    for name, attribute in source.attributes.items():
        is_list = attribute.type.startswith("list[")
        scalar_type = attribute.type[5:-1] if is_list else attribute.type
        try:
            values = select_values(selector, attribute)
        except ValueError as error:  # an expression lxml/cssselect cannot evaluate
            problems.append(Problem(name, "bad_selector", str(error), attribute.required))
            record[name] = [] if is_list else None
            continue
        if not values:
            problems.append(Problem(name, "missing", "the selector matched nothing", attribute.required))
            record[name] = [] if is_list else None
            continue
        if is_list:
            typed, errors = [], []
            for value in values:
                try:
                    typed.append(coerce(value, scalar_type, base))
                except CoercionError as error:
                    errors.append(str(error))
            if errors:
                problems.append(Problem(name, "wrong_type", "; ".join(errors[:3]),
                                        attribute.required and not typed))
            record[name] = typed
            continue
        try:
            record[name] = coerce(values[0], scalar_type, base)
        except CoercionError as error:
            problems.append(Problem(name, "wrong_type", str(error), attribute.required))
            record[name] = None
    extraction = Extraction(record, problems)
    if extraction.rejected_reason is not None:
        extraction.record = None
    return extraction
