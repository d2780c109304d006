"""Attributes of a record: where a value comes from, how it is cleaned and what type it is.

An attribute names exactly one selector kind: ``css`` or ``xpath`` over the HTML; ``jsonld``,
``microdata`` or ``meta`` over the structured data the page publishes; ``script_json`` over a JSON
blob or JavaScript object literal in a ``<script>``; ``json`` over a JSON response (``content: json``)
or over one item of ``listing.records``. The structured kinds take JMESPath expressions.

Extraction runs the fields of this model in stages: select (the selector kind) → post-process
(``regex``, ``strip``, ``join``, ``default``) → coerce (``type`` and its options) → validate (the value
rules of :mod:`harvester.config.value_rules`).

Nothing here imports the scraping layer: the config layer is below it. Library imports that cost
(babel's locale data) are made inside the validators that need them, so DAG parsing stays fast.
"""

from __future__ import annotations

import re
from datetime import timedelta
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from harvester.config.value_rules import DATE_TYPES, NUMBER_TYPES, ValueRules, scalar_type

DURATION_PATTERN = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_DURATION_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(value: Any) -> timedelta:
    """Read "90s", "15m", "6h", "7d", "2w" (or a number of seconds) as a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return timedelta(seconds=value)
    if isinstance(value, str) and (match := DURATION_PATTERN.match(value)):
        return timedelta(**{_DURATION_UNITS[match.group(2)]: int(match.group(1))})
    raise ValueError("expected a duration such as 90s, 15m, 6h, 7d or 2w")


def duration_schema(minimum: float, examples: str) -> WithJsonSchema:
    """The JSON schema of a duration field (what :func:`parse_duration` reads): a text such as ``examples`` or a
    number of seconds from ``minimum``; one definition, so every duration of a source is written alike."""
    return WithJsonSchema({
        "anyOf": [{"type": "string", "pattern": DURATION_PATTERN.pattern}, {"type": "number", "minimum": minimum}],
        "description": f"A duration: {examples}, or a number of seconds.",
    })

XPATH_PREFIX = "xpath:"
JSON_PREFIX = "json:"
_XPATH_NAMESPACES = {"re": "http://exslt.org/regular-expressions", "set": "http://exslt.org/sets"}
# EXSLT regular expressions run on Python's backtracking engine inside lxml: refused (see patterns.py).
_XPATH_REGEX_FUNCTION = re.compile(r"\bre:(?:test|match|replace)\s*\(")
_META_NAME = re.compile(r"^[A-Za-z][\w.:-]{0,199}$")

# present is a fact about the page (did the selector match), not one value per match: no list of it.
AttributeType = Literal[
    "str", "int", "float", "bool", "date", "datetime", "url", "price", "present",
    "list[str]", "list[int]", "list[float]", "list[bool]", "list[date]", "list[datetime]", "list[url]",
    "list[price]",
]
# Selector kinds that read an HTML page, and the ones that read JSON data (a response, or one record item).
HTML_SELECTOR_KINDS = ("css", "xpath", "jsonld", "microdata", "meta", "script_json")
ELEMENT_SELECTOR_KINDS = ("css", "xpath")
SELECTOR_KINDS = (*HTML_SELECTOR_KINDS, "json")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_selector(value: str) -> str:
    """A CSS selector (with parsel's ::text and ::attr()), or XPath after ``xpath:``; checked by compiling it."""
    from lxml import etree  # imported lazily, and compiled without building a document: DAG parsing stays fast
    from parsel.csstranslator import css2xpath

    expression = value.strip()
    if not expression:
        raise ValueError("empty selector")
    try:
        xpath = expression[len(XPATH_PREFIX):] if expression.startswith(XPATH_PREFIX) else css2xpath(expression)
        etree.XPath(xpath, namespaces=_XPATH_NAMESPACES)
    except Exception as error:  # cssselect and lxml raise several unrelated types
        raise ValueError(f"not a valid selector {value!r}: {error}") from error
    if _XPATH_REGEX_FUNCTION.search(xpath):
        raise ValueError("XPath regular expression functions (re:test, re:match, re:replace) run on a "
                         "backtracking engine and are not allowed; select the nodes, then filter with the "
                         "attribute type or listing.follow")
    return value


@lru_cache(maxsize=1024)
def compile_jmespath(expression: str) -> Any:
    """The compiled JMESPath expression (cached: every page asks for the same few).

    Raises :class:`ValueError` with the parser's reason on one line (``file:line: field: reason``).
    """
    import jmespath
    from jmespath.exceptions import JMESPathError

    if not expression.strip():
        raise ValueError("empty JMESPath expression")
    try:
        return jmespath.compile(expression)
    except JMESPathError as error:
        reason = " ".join(str(error).split("\n")[0].split())
        raise ValueError(f"not a valid JMESPath expression {expression!r}: {reason}") from None


def meta_expression(value: str) -> str:
    """A ``meta:`` value as a JMESPath expression: a bare meta name (``og:title``, ``twitter:card``) is
    quoted, since a colon is not allowed in a plain JMESPath identifier."""
    try:
        compile_jmespath(value)
    except ValueError:
        if _META_NAME.match(value):
            return '"' + value + '"'
        raise
    return value


def check_jmespath(value: str) -> str:
    compile_jmespath(value)
    return value


def check_xpath(value: str) -> str:
    return check_selector(XPATH_PREFIX + value)[len(XPATH_PREFIX):]


def check_meta(value: str) -> str:
    meta_expression(value)
    return value


def check_pattern(value: str) -> str:
    """On the linear-time engine values and links are matched with (Python's re would backtrack)."""
    from harvester.patterns import compile_pattern

    compile_pattern(value)
    return value


def check_locale(value: str) -> str:
    from babel import Locale, UnknownLocaleError

    try:
        Locale.parse(value)
    except (UnknownLocaleError, ValueError, TypeError) as error:
        raise ValueError(f"not a locale babel knows: {value!r} ({error})") from None
    return value


def check_timezone(value: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(f"not an IANA time zone: {value!r} ({error})") from None
    return value


# Strings checked where a field is declared, whatever model holds it (pydantic's reusable validators).
Selector = Annotated[str, AfterValidator(check_selector)]
XPath = Annotated[str, AfterValidator(check_xpath)]
JMESPath = Annotated[str, AfterValidator(check_jmespath)]
MetaExpression = Annotated[str, AfterValidator(check_meta)]
Pattern = Annotated[str, AfterValidator(check_pattern)]
LocaleName = Annotated[str, AfterValidator(check_locale)]
TimeZoneName = Annotated[str, AfterValidator(check_timezone)]


class StructuredPath(StrictModel):
    """A JMESPath expression over each structured-data item of the page, optionally only items of one type.

    A plain string is the path over every item. ``type`` matches an item's ``@type`` by its last segment,
    so ``Product`` matches ``Product``, ``schema:Product`` and ``https://schema.org/Product``.
    """

    path: JMESPath = Field(default="@", description="JMESPath over one item (default: the item itself).")
    type: str | None = Field(default=None, min_length=1, description="Only items of this @type, e.g. Product.")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value


class ScriptJson(StrictModel):
    """A ``<script>`` holding JSON or a JavaScript object literal (``__NEXT_DATA__``, ``window.__NUXT__ = {...}``),
    and a JMESPath expression over what it holds."""

    script: Selector = Field(description="CSS (or xpath:...) selecting the <script> element.")
    path: JMESPath = Field(default="@", description="JMESPath over the script's data.")


class SelectorFields(StrictModel):
    """Exactly one of these says where the values come from."""

    css: Selector | None = Field(default=None, description="CSS selector (parsel: ::text, ::attr(name)).")
    xpath: XPath | None = Field(default=None, description="XPath expression.")
    jsonld: StructuredPath | None = Field(default=None, description="JMESPath over the page's JSON-LD items.")
    microdata: StructuredPath | None = Field(default=None, description="JMESPath over the page's microdata items.")
    meta: MetaExpression | None = Field(
        default=None, description="A <meta> name (og:title, twitter:card, description) or JMESPath over "
                                  "{name: [contents]}.")
    script_json: ScriptJson | None = Field(default=None, description="A <script>'s JSON or object literal.")
    json_path: JMESPath | None = Field(default=None, alias="json",
                                  description="JMESPath over a JSON response or a record item.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """A plain string is a CSS selector; ``xpath:...`` an XPath; ``json:...`` a JMESPath expression."""
        if isinstance(value, str):
            stripped = value.strip()
            if stripped.startswith(XPATH_PREFIX):
                return {"xpath": stripped[len(XPATH_PREFIX):]}
            if stripped.startswith(JSON_PREFIX):
                return {"json": stripped[len(JSON_PREFIX):].strip()}
            return {"css": value}
        return value

    @model_validator(mode="after")
    def _one_selector(self) -> SelectorFields:
        given = self.selector_kinds_given()
        if len(given) != 1:
            kinds = ", ".join(SELECTOR_KINDS)
            raise ValueError(f"give exactly one selector kind of {kinds}" +
                             (f" (got {', '.join(given)})" if given else ""))
        return self

    def selector_kinds_given(self) -> list[str]:
        return [kind for kind in SELECTOR_KINDS if getattr(self, "json_path" if kind == "json" else kind) is not None]

    @property
    def kind(self) -> str:
        """Which selector kind this is: css, xpath, jsonld, microdata, meta, script_json or json."""
        return self.selector_kinds_given()[0]

    @property
    def expression(self) -> str:
        """The selector in one line, as `harvester try` shows it."""
        kind = self.kind
        if kind in ("jsonld", "microdata"):
            path: StructuredPath = getattr(self, kind)
            return f"{kind}: {path.path}" + (f" (type {path.type})" if path.type else "")
        if kind == "script_json":
            assert self.script_json is not None
            return f"script_json: {self.script_json.script} -> {self.script_json.path}"
        value = self.json_path if kind == "json" else getattr(self, kind)
        return f"{kind}: {value}"


class Attribute(SelectorFields, ValueRules):
    """One field of the record: a selector, post-processing, a type and value rules (after coercion).

    A plain string is shorthand for a CSS selector of a ``str`` (``xpath:`` prefix for XPath, ``json:``
    for JMESPath over JSON).
    """

    type: AttributeType = "str"
    required: bool = False
    # post-processing, in this order: regex, strip, join, default
    regex: Pattern | None = Field(default=None, description="RE2 pattern; a value becomes its first group (or the "
                                                        "whole match); a value it does not match is dropped.")
    strip: bool | str | None = Field(default=None, description="true: strip whitespace; a string: strip these "
                                                              "characters from both ends.")
    join: str | None = Field(default=None, description="Scalar types: join every match with this separator "
                                                      "instead of taking the first.")
    default: str | int | float | bool | None = Field(
        default=None, description="The value when nothing was selected (typed like a selected value).")
    # type options
    decimal_separator: Literal[".", ","] | None = Field(
        default=None,
        description="int, float, price: the decimal mark (the other one groups thousands). "
                    "Unset: the last of . and , when both appear; see docs/sources.md.",
    )
    locale: LocaleName | None = Field(default=None, description="int, float, price: the locale numbers are written in "
                                                        "(de_DE, fr_CH, en_US), through babel.")
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$",
                                 description="price: the ISO 4217 currency when the text names none or an "
                                             "ambiguous symbol ($, ¥, kr).")
    format: str | None = Field(default=None, min_length=1,
                               description="date, datetime: a strptime format such as %d.%m.%Y %H:%M.")
    dayfirst: bool = Field(default=False, description="date, datetime: 03/04/2024 is the 3rd of April.")
    timezone: TimeZoneName | None = Field(
        default=None, description="datetime: the IANA zone of times written without an offset (default UTC).")

    @model_validator(mode="after")
    def _options_fit_the_type(self) -> Attribute:
        kind = scalar_type(self.type)
        is_list = self.type.startswith("list[")
        rules = (
            ("decimal_separator", kind in NUMBER_TYPES, "only int, float and price attributes read numbers"),
            ("locale", kind in NUMBER_TYPES, "only int, float and price attributes read numbers"),
            ("currency", kind == "price", "only price attributes have a currency"),
            ("format", kind in DATE_TYPES, "only date and datetime attributes have a format"),
            ("timezone", kind == "datetime", "only datetime attributes have a time zone"),
            ("join", not is_list, "a list attribute keeps every match; join makes one value of them"),
            ("default", kind != "present", "a present attribute is never missing (it is false)"),
        )
        for name, allowed, reason in rules:
            if getattr(self, name) is not None and not allowed:
                raise ValueError(f"{name}: {reason}")
        if self.dayfirst and kind not in DATE_TYPES:
            raise ValueError("dayfirst: only date and datetime attributes read days")
        if self.decimal_separator is not None and self.locale is not None:
            raise ValueError("locale: give decimal_separator or locale, not both (the locale names the decimal mark)")
        if self.format is not None and self.dayfirst:
            raise ValueError("dayfirst: a format already says where the day is")
        if isinstance(self.default, bool) and kind not in ("bool", "str"):
            raise ValueError(f"default: true/false is not a {kind}")
        return self


def usable_attribute_names(attributes: dict[str, Attribute]) -> dict[str, Attribute]:
    check_attribute_names(attributes)
    return attributes


# A record's attributes by field name: names Harvester does not write itself, usable as document fields.
AttributeFields = Annotated[dict[str, Attribute], AfterValidator(usable_attribute_names)]


class RecordItem(SelectorFields):
    """What one record of a listing page is: elements (``css``/``xpath``) or data items (``jsonld``,
    ``microdata``, ``script_json``, ``json``: a JMESPath result that is a list of objects)."""

    @model_validator(mode="after")
    def _not_meta(self) -> RecordItem:
        if self.meta is not None:
            raise ValueError("meta: a page's <meta> tags describe the page, not the items of a listing")
        return self


class ListingRecords(StrictModel):
    """One record per item of a listing page: detail visits become optional."""

    item: RecordItem = Field(description="Selects the items: elements (css, xpath) or data objects (jsonld, "
                                         "microdata, script_json, json).")
    attributes: AttributeFields = Field(
        min_length=1, description="Fields of each item's record: css/xpath relative to an element item, "
                                  "json (JMESPath) relative to a data item.")
    key: list[str] = Field(min_length=1, description="Fields of the upsert key (the records' output.key).")

    @model_validator(mode="after")
    def _relative_selectors(self) -> ListingRecords:
        element_items = self.item.kind in ELEMENT_SELECTOR_KINDS
        allowed = ELEMENT_SELECTOR_KINDS if element_items else ("json",)
        for name, attribute in self.attributes.items():
            if attribute.kind not in allowed:
                what = "an element (css or xpath)" if element_items else "a data item (json)"
                raise ValueError(f"attributes.{name}: the items are {what}: use {' or '.join(allowed)} "
                                 f"relative to the item, not {attribute.kind}")
        for field in self.key:
            attribute = self.attributes.get(field)
            if attribute is None:
                raise ValueError(f"key: {field!r} is not an attribute of the records (the listing page's url is "
                                 "the same for every item, so it cannot be the key)")
            if attribute.type.startswith("list[") or attribute.type in ("price", "present"):
                raise ValueError(f"key: {field!r} is a {attribute.type} attribute; key fields are plain values")
        return self


RESERVED_FIELDS = ("_id", "url", "first_seen_at", "harvested_at", "run_id", "changed_at", "_http", "gone_at",
                   "gone_reason", "config_version", "requested_urls")


def check_attribute_names(attributes: dict[str, Any]) -> None:
    for name in attributes:
        if name in RESERVED_FIELDS:
            raise ValueError(f"{name!r} is reserved: Harvester writes {', '.join(RESERVED_FIELDS)} itself")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"{name!r} is not a usable record field name (letters, digits and _)")


def check_link_expression(value: str, content: str) -> None:
    """A listing's link or next-page selector: CSS/XPath on HTML pages, ``json:`` JMESPath on JSON pages."""
    if value.strip().startswith(JSON_PREFIX):
        if content != "json":
            raise ValueError(f"{value!r}: json: expressions read JSON responses (content: json)")
        compile_jmespath(value.strip()[len(JSON_PREFIX):].strip())
    elif content == "json":
        raise ValueError(f"{value!r}: a content: json source finds links with json: expressions (JMESPath)")


def check_extraction_rules(content: str, render: str, attributes: dict[str, Attribute],
                           records: ListingRecords | None, output_key: list[str], key_given: bool,
                           follows_details: bool) -> None:
    """The rules across a source's attributes, its listing records and its output key.

    Raises ``ValueError("<field>: <reason>")`` so the loader points at the field's line.
    """
    if not attributes and records is None:
        raise ValueError("attributes: give at least one attribute (or listing.records)")
    if content == "json" and render == "browser":
        raise ValueError("render: a content: json source reads JSON responses over HTTP, not rendered pages")
    for name, attribute in attributes.items():
        if content == "json" and attribute.kind != "json":
            raise ValueError(f"attributes.{name}: a content: json source reads its responses with json: "
                             f"(JMESPath), not {attribute.kind}")
        if content == "html" and attribute.kind == "json":
            raise ValueError(f"attributes.{name}: json: reads JSON responses; set content: json, or read a "
                             "<script> with script_json")
    if records is not None:
        item_kind = records.item.kind
        if content == "json" and item_kind != "json":
            raise ValueError(f"listing.records.item: a content: json source selects items with json:, not {item_kind}")
        if content == "html" and item_kind == "json":
            raise ValueError("listing.records.item: json: reads JSON responses (content: json)")
        if key_given and list(output_key) != list(records.key):
            raise ValueError("output.key: one collection has one unique key: make it the same as listing.records.key "
                             "(or leave it out)")
        if follows_details and attributes:
            for field in records.key:
                if field not in attributes:
                    raise ValueError(f"listing.records.key: {field!r} must be an attribute of the detail pages too, "
                                     "so their records and the listing's land in the same documents")
