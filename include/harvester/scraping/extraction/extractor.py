"""Extraction: a source's attributes into a typed record, or a listing page's items into records.

Each attribute goes through four stages, one function each:

1. :func:`select`: the attribute's selector kind gives raw values: CSS or XPath over the HTML (an
   element gives its normalised text), JMESPath over the page's JSON-LD, microdata or ``<meta>``
   names, over a ``<script>``'s data, or over a JSON response or record item
   (:class:`~harvester.scraping.extraction.structured.PageData` parses each of those once per page);
2. :func:`post_process`: ``regex`` (RE2, the first group), ``strip``, ``join``, ``default``;
3. :func:`coerce_values`: the ``type`` (:mod:`harvester.scraping.extraction.coercion`);
4. :func:`~harvester.scraping.extraction.validation.validate_value`: the value rules (``min``, ``max``, ``pattern``,
   ``enum``, ``min_length``, ``max_length``, ``not_empty``).

The rules of DESIGN.md section 9: a missing or mistyped optional attribute is stored as null and the
gap counted; a missing or mistyped required attribute rejects the record with the reason. Malformed
HTML never raises (lxml repairs it); a selector that cannot be evaluated is a problem, not a crash.

Hostile pages are bounded: a scalar attribute takes the text of its FIRST match only (all of them,
nested in each other, once cost 21 s and 2 GB on a 2 MB page); a value longer than
``max_value_length`` is refused (``too_long``), and once a page has given ``max_page_characters``
characters the rest of its values are refused (``too_large``); embedded JSON is bounded in size and
nesting before it is parsed (``too_large``, ``too_deep``); a listing page gives at most
:data:`MAX_RECORDS_PER_PAGE` records.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lxml import etree
from parsel import Selector
from parsel.csstranslator import css2xpath as css_to_xpath

from harvester.config import ELEMENT_SELECTOR_KINDS, Attribute, RecordItem, SourceConfig, scalar_type
from harvester.errors import CoercionError
from harvester.patterns import compile_pattern
from harvester.scraping.extraction.coercion import INT64_MAX, INT64_MIN, coerce, coerce_value, parse_decimal
from harvester.scraping.extraction.structured import PageData, StructuredDataError, gather, search
from harvester.scraping.extraction.validation import Problem, validate_value

if TYPE_CHECKING:
    from harvester.settings import HarvesterSettings

__all__ = ["INT64_MAX", "INT64_MIN", "MAX_RECORDS_PER_PAGE", "AttributeTrace", "CoercionError", "Extraction",
           "Problem", "Scope", "Selection", "coerce", "coerce_values", "extract_listing_records", "extract_record",
           "parse_decimal", "parse_html", "post_process", "select", "select_values"]

MAX_RECORDS_PER_PAGE = 10_000  # items of one listing page that become records; the rest are counted, not read
TRACE_SAMPLES = 3
TRACE_SAMPLE_CHARACTERS = 120


@dataclass
class AttributeTrace:
    """What one attribute's selector matched on one page (for `harvester try`)."""

    selector: str
    matched: int
    samples: list[str]
    value: Any = None
    problem: str | None = None


@dataclass
class Extraction:
    """A typed record (None when rejected), the problems found on the way, and (when asked) traces."""

    record: dict[str, Any] | None
    problems: list[Problem] = field(default_factory=list)
    traces: dict[str, AttributeTrace] | None = None
    values: dict[str, Any] = field(default_factory=dict)  # what was extracted, the rejected record's too

    def has_value(self, attribute: str) -> bool:
        """Whether the page gave the attribute a value (stored or rejected): the drift figures count it."""
        value = self.values.get(attribute)
        return value is not None and value != []

    @property
    def rejections(self) -> list[Problem]:
        """The problems that rejected the record: each names its attribute and rule (kind)."""
        return [problem for problem in self.problems if problem.required]

    @property
    def rejected_reason(self) -> str | None:
        required = [str(problem) for problem in self.problems if problem.required]
        return "; ".join(required) if required else None


class _Budget:
    """Characters a page may still give (``too_large`` past it) and the longest one value may be."""

    def __init__(self, max_value_length: int, max_page_characters: int) -> None:
        self.max_value_length = max_value_length
        self.left = max_page_characters

    @classmethod
    def of(cls, max_value_length: int | None, max_page_characters: int | None) -> _Budget:
        settings = _settings() if max_value_length is None or max_page_characters is None else None
        return cls(max_value_length if max_value_length is not None else settings.max_value_length,
                   max_page_characters if max_page_characters is not None else settings.max_extracted_characters)


@dataclass
class Scope:
    """Where an attribute's selector reads: the page, one element of it (a listing item), or one data
    object (a listing item from JSON-LD, microdata, a script or a JSON response)."""

    page: PageData
    element: Selector | None = None  # css/xpath read this; None: the page's document
    data: Any = None  # json reads this when ``has_data``; else the page's JSON response
    has_data: bool = False

    @property
    def document(self) -> Selector:
        return self.element if self.element is not None else self.page.selector

    def json(self) -> Any:
        return self.data if self.has_data else self.page.json


@dataclass
class Selection:
    """What a selector gave: raw values, how many it matched, and why some or all were not read."""

    values: list[Any]
    matched: int = 0
    refused: str | None = None  # too_long (a value over the cap) or too_large (the page's budget)
    unreadable: tuple[str, str] | None = None  # the data could not be read: (kind, detail)


# A node's text cut by libxml2 (``$limit`` a variable, so one compiled expression serves every budget: a
# limit written into the expression made each call a new expression to compile).
_NODE_TEXT = etree.XPath("substring(normalize-space(string()), 1, $limit)", smart_strings=False)


def _node_text(node: Any, limit: int) -> str:
    """The normalised text of one selected node (an lxml element, or a string, number or boolean an expression
    gave), at most ``limit`` characters of it (libxml2 cuts it)."""
    if isinstance(node, str):
        value = node[: limit * 4 + 64]  # whitespace collapses; this bounds the Python copy
    elif isinstance(node, bool | int | float):
        value = str(node)
    else:
        value = _NODE_TEXT(node, limit=limit)
    return " ".join(value.split())[:limit]


@functools.lru_cache(maxsize=1024)
def _compiled(expression: str) -> etree.XPath | None:
    """The attribute's selector compiled once (None: an expression parsel alone reads, as one naming parsel's
    EXSLT prefixes or a syntax lxml refuses, which then fails through parsel with its usual message)."""
    if "re:" in expression or "set:" in expression:
        return None
    try:
        return etree.XPath(expression, smart_strings=False)
    except etree.XPathError:
        return None


def _matches(document: Selector, attribute: Attribute) -> list[Any]:
    """What the attribute's selector matches in ``document``: lxml's results evaluated directly (parsel
    wraps every result in a Selector, about a third of extraction's CPU), parsel's for the rest."""
    compiled = None
    if isinstance(document.root, etree._Element) and (attribute.css is None or document.type == "html"):
        # parsel reads CSS by its HTML translator in HTML documents (element names case-insensitive)
        expression = css_to_xpath(attribute.css) if attribute.css is not None else (attribute.xpath or "")
        compiled = _compiled(expression)
    if compiled is None:
        nodes = document.css(attribute.css) if attribute.css is not None else document.xpath(attribute.xpath or "")
        return [node.root for node in nodes]
    try:
        result = compiled(document.root)
    except etree.XPathError as error:
        raise ValueError(f"XPath error: {error} in {expression}") from error
    return result if isinstance(result, list) else [result]


def _select_nodes(document: Selector, attribute: Attribute, first_only: bool, budget: _Budget) -> Selection:
    nodes = _matches(document, attribute)
    selection = Selection([], matched=len(nodes))
    for node in nodes:
        if budget.left <= 0:
            selection.refused = "too_large"
            return selection
        value = _node_text(node, min(budget.max_value_length, budget.left) + 1)
        if not value:
            continue
        if len(value) > budget.left:
            selection.refused = "too_large"
            return selection
        budget.left -= len(value)
        if len(value) > budget.max_value_length:
            selection.refused = "too_long"
        else:
            selection.values.append(value)
        if first_only:
            break
    return selection


def _within_budget(selection: Selection, budget: _Budget) -> Selection:
    """Data values count against the page's budget like text does (strings by their length)."""
    kept: list[Any] = []
    for value in selection.values:
        size = len(value) if isinstance(value, str) else 8
        if size > budget.left:
            selection.refused = "too_large"
            break
        budget.left -= size
        if size > budget.max_value_length:
            selection.refused = "too_long"
            continue
        kept.append(value)
    selection.values = kept
    return selection


def select(attribute: Attribute, scope: Scope, first_only: bool, budget: _Budget, kind: str | None = None) -> Selection:
    """Stage 1: the raw values the attribute's selector gives in ``scope`` (``kind``: its selector kind, when the
    caller has read it already)."""
    kind = kind or attribute.kind
    if kind in ELEMENT_SELECTOR_KINDS:
        return _select_nodes(scope.document, attribute, first_only, budget)
    if kind == "json":
        try:
            data = scope.json()
        except StructuredDataError as error:
            return Selection([], unreadable=(error.kind, error.detail))
        values = gather([search(attribute.json_path or "@", data)], first_only)
    else:
        spec = getattr(attribute, kind)
        values = scope.page.structured_values(kind, spec, first_only)
        if not values and (unreadable := scope.page.unreadable_for(kind, spec)) is not None:
            return Selection([], unreadable=unreadable)
    return _within_budget(Selection(values, matched=len(values)), budget)


def select_values(selector: Selector, attribute: Attribute, first_only: bool = False,
                  budget: _Budget | None = None) -> tuple[list[str], str | None]:
    """The stripped, non-empty strings a CSS/XPath attribute selects, and why any were refused."""
    selection = _select_nodes(selector, attribute, first_only, budget or _Budget.of(None, None))
    return selection.values, selection.refused


def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return coerce_value(value, "str", "")
    return None  # objects and lists are not text: regex and strip leave them out


def post_processes(attribute: Attribute) -> bool:
    """Whether :func:`post_process` can change anything for ``attribute`` (its conditions, read once a page): most
    attributes have no ``regex``, ``strip``, ``join`` or ``default``, and their values pass as they are."""
    return (attribute.regex is not None or (attribute.strip is not None and attribute.strip is not False)
            or attribute.join is not None or attribute.default is not None)


def post_process(attribute: Attribute, values: list[Any]) -> list[Any]:
    """Stage 2: ``regex`` (first group, or the whole match; a value it does not match is dropped),
    ``strip``, ``join`` (every value into one), then ``default`` when nothing is left."""
    if attribute.regex is not None:
        pattern = compile_pattern(attribute.regex)
        kept = []
        for value in values:
            text = _as_text(value)
            match = pattern.search(text) if text is not None else None
            if match is not None:
                group = match.group(1) if pattern.groups >= 1 else match.group(0)
                if group is not None:
                    kept.append(group)
        values = kept
    if attribute.strip is not None and attribute.strip is not False:
        characters = None if attribute.strip is True else str(attribute.strip)
        values = [text.strip(characters) if (text := _as_text(value)) is not None else value for value in values]
        values = [value for value in values if value != ""]
    if attribute.join is not None and values:
        values = [attribute.join.join(text for value in values if (text := _as_text(value)) is not None)]
    if not values and attribute.default is not None:
        values = [attribute.default]
    return values


def coerce_values(name: str, attribute: Attribute, values: list[Any], base: str, matched: bool,
                  problems: list[Problem], facts: AttributeFacts | None = None) -> Any:
    """Stage 3: the values as the attribute's type (a list type keeps every value that fits)."""
    kind, is_list = (facts.scalar, facts.is_list) if facts is not None else (
        scalar_type(attribute.type), attribute.type.startswith("list["))
    if kind == "present":
        return bool(values) if attribute.regex is not None else matched or bool(values)
    if is_list:
        typed, errors = [], []
        for value in values:
            try:
                typed.append(coerce_value(value, kind, base, attribute))
            except CoercionError as error:
                errors.append(str(error))
        if errors:
            problems.append(Problem(name, "wrong_type", "; ".join(errors[:3]), attribute.required and not typed))
        return typed
    try:
        return coerce_value(values[0], kind, base, attribute)
    except CoercionError as error:
        problems.append(Problem(name, "wrong_type", str(error), attribute.required))
        return None


def _missing_detail(attribute: Attribute, selection: Selection) -> str:
    if selection.matched and attribute.regex is not None:
        return f"the selector matched {selection.matched} value(s); the regex matched none of them"
    if selection.matched:
        return f"the selector matched {selection.matched} node(s), all empty"
    return "the selector matched nothing"


@dataclass(frozen=True)
class AttributeFacts:
    """What extraction asks of an attribute's config for every item: read once per page, not once per item (a
    listing page of 50 items asked each of them 50 times, a tenth of the page's extraction)."""

    kind: str  # its selector kind
    checks_rules: bool  # it has value rules to check
    scalar: str  # its type, or a list type's element type
    is_list: bool  # a list type: every value that fits is kept
    first_only: bool  # one value is read (a scalar, not joined, not ``present`` with a regex)
    post_processes: bool  # regex, strip, join or default may change its values (:func:`post_processes`)

    @classmethod
    def of(cls, attribute: Attribute) -> AttributeFacts:
        is_list = attribute.type.startswith("list[")
        present_with_regex = attribute.type == "present" and attribute.regex is not None
        return cls(attribute.kind, attribute.has_value_rules, scalar_type(attribute.type), is_list,
                   not is_list and attribute.join is None and not present_with_regex, post_processes(attribute))

    @classmethod
    def of_all(cls, attributes: dict[str, Attribute]) -> dict[str, AttributeFacts]:
        return {name: cls.of(attribute) for name, attribute in attributes.items()}


def extract_attribute(name: str, attribute: Attribute, scope: Scope, base: str, budget: _Budget,
                      problems: list[Problem], traces: dict[str, AttributeTrace] | None = None,
                      facts: AttributeFacts | None = None) -> Any:
    """One attribute through the four stages; its problems are appended to ``problems``. ``facts``: what the
    attribute's config says, when the caller has read it already (a listing page reads it once for its items)."""
    facts = facts if facts is not None else AttributeFacts.of(attribute)
    before = len(problems)
    empty: Any = [] if facts.is_list else None
    try:
        selection = select(attribute, scope, facts.first_only, budget, facts.kind)
    except (ValueError, RecursionError) as error:  # an expression lxml, cssselect or JMESPath cannot evaluate here
        problems.append(Problem(name, "bad_selector", str(error), attribute.required))
        selection, value = Selection([]), empty
    else:
        if selection.refused is not None:
            detail = (f"a value is longer than {budget.max_value_length:,} characters"
                      if selection.refused == "too_long"
                      else "the page gave more text than the extraction budget allows")
            problems.append(Problem(name, selection.refused, detail, attribute.required and not selection.values))
        values = post_process(attribute, selection.values) if facts.post_processes else selection.values
        if facts.scalar == "present":
            value = coerce_values(name, attribute, values, base, selection.matched > 0, problems, facts)
        elif not values:
            if selection.unreadable is not None:
                problems.append(Problem(name, selection.unreadable[0], selection.unreadable[1], attribute.required))
            elif selection.refused is None:
                problems.append(Problem(name, "missing", _missing_detail(attribute, selection), attribute.required))
            value = empty
        else:
            value = coerce_values(name, attribute, values, base, True, problems, facts)
        value = validate_value(name, attribute, value, problems, facts.checks_rules)
    if traces is not None:
        samples = [_sample(raw) for raw in selection.values[:TRACE_SAMPLES]]
        problem = str(problems[before]) if len(problems) > before else None
        traces[name] = AttributeTrace(attribute.expression, selection.matched, samples, value, problem)
    return value


def _sample(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= TRACE_SAMPLE_CHARACTERS else text[:TRACE_SAMPLE_CHARACTERS] + "…"


def _settings() -> HarvesterSettings:
    from harvester.settings import get_settings

    return get_settings()


def parse_html(text: str, url: str) -> Selector:
    return Selector(text=text or "<html></html>", base_url=url)


def _record(attributes: dict[str, Attribute], scope: Scope, url: str, base: str, budget: _Budget,
            trace: bool, facts: dict[str, AttributeFacts] | None = None) -> Extraction:
    record: dict[str, Any] = {"url": url}
    problems: list[Problem] = []
    traces: dict[str, AttributeTrace] | None = {} if trace else None
    facts = facts if facts is not None else AttributeFacts.of_all(attributes)
    for name, attribute in attributes.items():
        record[name] = extract_attribute(name, attribute, scope, base, budget, problems, traces, facts[name])
    extraction = Extraction(record, problems, traces, values=record)
    if extraction.rejected_reason is not None:
        extraction.record = None
    return extraction


def extract_record(source: SourceConfig, page: PageData | Selector, url: str, base_url: str | None = None, *,
                   max_value_length: int | None = None, max_page_characters: int | None = None,
                   trace: bool = False) -> Extraction:
    """Every attribute of the source from one page, typed; ``url`` is always part of the record.

    ``page`` is a :class:`PageData` (or a parsel Selector of an HTML page). Relative ``url``
    attributes resolve against ``base_url`` (the page after redirects), else ``url``. The caps
    default to the settings ``max_value_length`` and ``max_extracted_characters``; ``trace`` keeps
    what each selector matched (`harvester try`).
    """
    base = base_url or url
    data = PageData.of(page, base)
    budget = _Budget.of(max_value_length, max_page_characters)
    return _record(source.attributes, Scope(data), url, base, budget, trace)


@dataclass
class ListingRecords:
    """The records of one listing page's items, and what kept some items out."""

    extractions: list[Extraction] = field(default_factory=list)
    items: int = 0
    problem: Problem | None = None  # the items themselves could not be selected (the page, not one item)

    @property
    def records(self) -> list[dict[str, Any]]:
        return [extraction.record for extraction in self.extractions if extraction.record is not None]

    @property
    def rejected(self) -> list[Extraction]:
        return [extraction for extraction in self.extractions if extraction.record is None]


def select_items(item: RecordItem, page: PageData) -> list[Scope]:
    """The items of a listing page: elements (css, xpath) or data objects (any other kind)."""
    kind = item.kind
    if kind in ELEMENT_SELECTOR_KINDS:
        nodes = page.selector.css(item.css) if item.css is not None else page.selector.xpath(item.xpath or "")
        return [Scope(page, element=node) for node in nodes if not isinstance(node.root, str)]
    if kind == "json":
        values = gather([search(item.json_path or "@", page.json)], first_only=False)
    else:
        spec = getattr(item, kind)
        values = page.structured_values(kind, spec, first_only=False)
        if not values and (unreadable := page.unreadable_for(kind, spec)) is not None:
            raise StructuredDataError(*unreadable)
    return [Scope(page, data=value, has_data=True) for value in values if isinstance(value, dict)]


def extract_listing_records(source: SourceConfig, page: PageData | Selector, url: str, base_url: str | None = None,
                            *, max_value_length: int | None = None, max_page_characters: int | None = None,
                            trace: bool = False) -> ListingRecords:
    """One record per item of a listing page (``listing.records``); each record's ``url`` is the page's."""
    result = ListingRecords()
    records = source.listing.records if source.listing is not None else None
    if records is None:
        return result
    base = base_url or url
    data = PageData.of(page, base)
    budget = _Budget.of(max_value_length, max_page_characters)
    try:
        items = select_items(records.item, data)
    except StructuredDataError as error:
        result.problem = Problem("listing.records.item", error.kind, error.detail)
        return result
    except ValueError as error:
        result.problem = Problem("listing.records.item", "bad_selector", str(error))
        return result
    result.items = len(items)
    if not items:
        result.problem = Problem("listing.records.item", "missing", "the item selector matched nothing")
    facts = AttributeFacts.of_all(records.attributes)
    for scope in items[:MAX_RECORDS_PER_PAGE]:
        result.extractions.append(_record(records.attributes, scope, url, base, budget, trace, facts))
        if budget.left <= 0:
            break
    return result
