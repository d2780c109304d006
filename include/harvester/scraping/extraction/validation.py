"""Stage 4 of extraction: the attribute's value rules (:mod:`harvester.config.value_rules`) on typed values.

A value that breaks a rule is not kept: a required attribute's problem rejects the record (the problem's
``kind`` is the rule, so the rejection names attribute and rule), an optional one's value is dropped
(null, or left out of a list) and the problem counted, as a missing value is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from harvester.config import rule_bound
from harvester.patterns import compile_pattern

if TYPE_CHECKING:
    from harvester.config import Attribute

__all__ = ["Problem", "broken_rule", "validate_value"]

SHOWN_CHARACTERS = 60


@dataclass(frozen=True, slots=True)
class Problem:
    """One gap in a record: ``kind`` is missing, wrong_type, too_long, too_large, too_deep, bad_json,
    bad_selector...; ``required`` ones reject the record."""

    attribute: str
    kind: str
    detail: str
    required: bool = False

    @property
    def counter(self) -> str:
        return f"{self.kind}:{self.attribute}"

    def __str__(self) -> str:
        return f"{self.attribute}: {self.kind} ({self.detail})" + (" [required]" if self.required else "")


def _short(value: Any) -> str:
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    return repr(text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "…")


def _comparable(value: Any) -> Any:
    """A price compares by its amount; numbers and aware datetimes as they are."""
    if isinstance(value, dict) and "amount" in value:
        value = value["amount"]
    return float(value) if isinstance(value, Decimal) else value


def broken_rule(attribute: Attribute, value: Any) -> tuple[str, str] | None:
    """The first rule ``value`` (one typed value, not a list) breaks, as (rule, detail); None when it passes."""
    if attribute.min is not None or attribute.max is not None:
        number = _comparable(value)
        if attribute.min is not None and number < rule_bound(attribute.min):
            return "min", f"{_short(number)} is below the minimum {attribute.min}"
        if attribute.max is not None and number > rule_bound(attribute.max):
            return "max", f"{_short(number)} is above the maximum {attribute.max}"
    if isinstance(value, str):
        if attribute.not_empty and not value.strip():
            return "not_empty", "the text is blank"
        if attribute.min_length is not None and len(value) < attribute.min_length:
            return "min_length", f"{len(value)} characters, fewer than {attribute.min_length}"
        if attribute.max_length is not None and len(value) > attribute.max_length:
            return "max_length", f"{len(value)} characters, more than {attribute.max_length}"
        if attribute.pattern is not None and compile_pattern(attribute.pattern).search(value) is None:
            return "pattern", f"{_short(value)} does not match {attribute.pattern!r}"
    if attribute.enum is not None and value not in attribute.enum:
        return "enum", f"{_short(value)} is not one of {', '.join(map(str, attribute.enum[:10]))}"
    return None


def validate_value(name: str, attribute: Attribute, value: Any, problems: list[Problem],
                   checks_rules: bool | None = None) -> Any:
    """The value once its rules held: the same value, null (a scalar broke one), or the list's values that
    passed. Each failure appends one :class:`Problem` named by the rule. ``checks_rules``: whether the attribute
    has rules, when the caller has read it already."""

    if not (attribute.has_value_rules if checks_rules is None else checks_rules) or value is None:
        return value
    if isinstance(value, list):
        kept, broken = [], []
        for item in value:
            failure = broken_rule(attribute, item)
            if failure is None:
                kept.append(item)
            else:
                broken.append(failure)
        if broken:
            rule, detail = broken[0]
            more = f" (and {len(broken) - 1} more values)" if len(broken) > 1 else ""
            problems.append(Problem(name, rule, detail + more, attribute.required and not kept))
        already = any(problem.attribute == name for problem in problems)
        if attribute.not_empty and not kept and not already:
            problems.append(Problem(name, "not_empty", "the list is empty", attribute.required))
        return kept
    failure = broken_rule(attribute, value)
    if failure is None:
        return value
    problems.append(Problem(name, failure[0], failure[1], attribute.required))
    return None
