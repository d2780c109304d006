"""Value rules of an attribute: what a typed value must be to be kept.

They run after coercion (:mod:`harvester.scraping.extraction.validation`), so they compare typed values: ``min`` and
``max`` bound numbers (a price by its amount) and dates; ``pattern`` (RE2, matched anywhere: anchor it
with ``^...$``), ``min_length``, ``max_length`` and ``enum`` check text; ``not_empty`` refuses blank text
and empty lists. A list attribute's rules hold for each of its values (``not_empty`` for the list). A
failed rule on a ``required`` attribute rejects the record; on an optional one the value is dropped and
the problem counted, like a missing value.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TEXT_TYPES = ("str", "url")
NUMBER_TYPES = ("int", "float", "price")
DATE_TYPES = ("date", "datetime")
RULE_NAMES = ("min", "max", "pattern", "enum", "min_length", "max_length", "not_empty")


def scalar_type(attribute_type: str) -> str:
    """``list[int]`` → ``int``; a scalar type is itself."""
    return attribute_type[5:-1] if attribute_type.startswith("list[") else attribute_type


class ValueRules(BaseModel):
    """The rules an attribute's typed value must pass (mixed into :class:`~harvester.config.Attribute`, which
    imports this module; the type families live here, below it, so the two never import each other)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: float | str | None = Field(default=None, description="Value rule: the least number (int, float, price "
                                                               "amount) or date/datetime (ISO 8601) kept.")
    max: float | str | None = Field(default=None, description="Value rule: the greatest number or date kept.")
    pattern: str | None = Field(default=None, description="Value rule (str, url): an RE2 pattern the text must "
                                                          "match somewhere (anchor with ^...$).")
    enum: list[str | int | float] | None = Field(default=None, min_length=1,
                                                 description="Value rule (str, url, int, float): the only values kept.")
    min_length: int | None = Field(default=None, ge=0, description="Value rule (str, url): fewest characters.")
    max_length: int | None = Field(default=None, ge=1, description="Value rule (str, url): most characters.")
    not_empty: bool = Field(default=False, description="Value rule: blank text and empty lists are refused.")

    @field_validator("min", "max", mode="before")
    @classmethod
    def _dates_as_text(cls, value: Any) -> Any:
        """YAML reads 2024-01-01 as a date: kept as its ISO text (the registered copy is JSON)."""
        return value.isoformat() if isinstance(value, date | datetime) else value

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            from harvester.patterns import compile_pattern

            compile_pattern(value)
        return value

    @model_validator(mode="after")
    def _rules_fit_the_type(self) -> ValueRules:
        kind = scalar_type(getattr(self, "type", "str"))
        bounded = kind in NUMBER_TYPES or kind in DATE_TYPES
        checks = (
            ("min", bounded, "only numbers (int, float, price) and dates have a minimum"),
            ("max", bounded, "only numbers (int, float, price) and dates have a maximum"),
            ("pattern", kind in TEXT_TYPES, "only str and url values match a pattern"),
            ("min_length", kind in TEXT_TYPES, "only str and url values have a length"),
            ("max_length", kind in TEXT_TYPES, "only str and url values have a length"),
            ("enum", kind in (*TEXT_TYPES, "int", "float"), "only str, url, int and float values are listed"),
        )
        for name, allowed, reason in checks:
            if getattr(self, name) is not None and not allowed:
                raise ValueError(f"{name}: {reason}")
        for name in ("min", "max"):
            bound = getattr(self, name)
            if isinstance(bound, str):
                if kind not in DATE_TYPES:
                    raise ValueError(f"{name}: a {kind} attribute is bounded by a number, not {bound!r}")
                rule_bound(bound)
            elif bound is not None and kind in DATE_TYPES:
                raise ValueError(f"{name}: a {kind} attribute is bounded by an ISO 8601 date, not {bound!r}")
        low, high = self.min, self.max
        if low is not None and high is not None and rule_bound(low) > rule_bound(high):
            raise ValueError("max: is below min")
        if self.min_length is not None and self.max_length is not None and self.min_length > self.max_length:
            raise ValueError("max_length: is below min_length")
        if kind == "present" and self.not_empty:
            raise ValueError("not_empty: a present attribute is true or false, never empty")
        return self

    @property
    def has_value_rules(self) -> bool:
        return self.not_empty or any(getattr(self, name) is not None for name in RULE_NAMES[:-1])


def rule_bound(value: float | str) -> Any:
    """A ``min``/``max`` as it is compared: a number, or an aware datetime (a date is its midnight, UTC)."""
    if not isinstance(value, str):
        return value
    from datetime import UTC

    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"not an ISO 8601 date or datetime: {value!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
