"""A fetched page as every selector kind reads it, each form parsed at most once per page.

The HTML is parsed once (parsel over lxml); the page's JSON-LD items, microdata items, ``<meta>``
names, the data of each ``<script>`` a ``script_json`` selector names, and a JSON response body are
each read on first use and shared by every attribute of the page (and every item of a listing).

Embedded data is hostile input like the HTML around it, and is bounded the same way:

- size: one JSON-LD block or script over ``max_embedded_json_bytes`` characters is not parsed (its
  attributes report ``too_large``); a JSON response is already cut at the body size cap;
- nesting: data nested deeper than ``max_json_depth`` (brackets counted outside strings, in linear
  time, before any parser runs) is not parsed (``too_deep``), so neither json's recursion nor chompjs's
  parser ever sees it;
- no entity expansion: the HTML parser loads no DTD and JSON has no entities.

JSON-LD is read with the standard library (then chompjs for the lenient JSON sites write: comments,
trailing commas); JavaScript object literals with chompjs; microdata with extruct's W3C algorithm
(imported on first use: it costs about 0.4 s and 35 MB, so only processes that read microdata pay).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate
from typing import Any

import re2
from parsel import Selector

from harvester.config import XPATH_PREFIX, StructuredPath, compile_jmespath, meta_expression

JSONLD_XPATH = '//script[@type="application/ld+json"]'
_HTML_OR_JS_COMMENT_LINE = re.compile(r"^\s*(//.*|<!--.*-->|<!--|-->)\s*$", re.MULTILINE)
# A <script type="application/ld+json"> block in the raw HTML (RE2: linear whatever the page). Script data is
# raw text in HTML (no entities), ending at the first </script: the scan reads what the HTML parser would,
# so a source of jsonld: attributes alone never builds the document tree.
_JSONLD_SCRIPT = re2.compile(
    r"(?is)<script\b[^>]*?\btype\s*=\s*[\"']?application/ld\+json[\"']?[^>]*>(.*?)</script")
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")  # one character class: linear on Python's engine too
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
MAX_GRAPH_NESTING = 4  # @graph inside @graph inside a list...: deeper is not flattened


class StructuredDataError(ValueError):
    """Embedded data that was not parsed: ``kind`` is too_large, too_deep or bad_json."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def nesting_depth(text: str, at_most: int | None = None) -> int:
    """How deep ``[`` and ``{`` nest in ``text``, outside quoted strings, in linear time (C loops only).

    Strings are dropped by splitting on their quotes (escapes removed first); a bracket inside a string
    the split misreads only makes the count approximate, never slow, and the parsers' own recursion
    limits stay behind it. With ``at_most``, text with no more opening brackets than that returns at once.
    """
    if at_most is not None and text.count("[") + text.count("{") <= at_most:
        return 0
    outside = "".join(text.replace("\\\\", "").replace('\\"', "").split('"')[::2])
    outside = "".join(outside.replace("\\'", "").split("'")[::2])
    brackets = _NOT_BRACKETS.sub("", outside)
    if not brackets:
        return 0
    return max(0, max(accumulate(map(_BRACKET_STEP.__getitem__, brackets))))


@dataclass(frozen=True)
class DataBounds:
    """The caps of embedded data (settings ``max_embedded_json_bytes`` and ``max_json_depth``)."""

    max_characters: int = 2 * 1024 * 1024
    max_depth: int = 100

    @classmethod
    def from_settings(cls, settings: Any = None) -> DataBounds:
        if settings is None:
            from harvester.settings import get_settings

            settings = get_settings()
        return cls(settings.max_embedded_json_bytes, settings.max_json_depth)

    def check(self, text: str, what: str, *, size: bool = True) -> None:
        if size and len(text) > self.max_characters:
            raise StructuredDataError("too_large", f"{what} holds {len(text):,} characters, over the "
                                                   f"{self.max_characters:,} of max_embedded_json_bytes")
        depth = nesting_depth(text, at_most=self.max_depth)
        if depth > self.max_depth:
            raise StructuredDataError("too_deep", f"{what} nests {depth} levels deep, over the "
                                                  f"{self.max_depth} of max_json_depth")


def parse_json_text(text: str, bounds: DataBounds, what: str, *, javascript: bool = False) -> Any:
    """JSON (or, with ``javascript`` or as a fallback, a JavaScript object literal) within the bounds."""
    bounds.check(text, what)
    if not javascript:
        try:
            return json.loads(text, strict=False)
        except ValueError:
            text = _HTML_OR_JS_COMMENT_LINE.sub("", text)
    import chompjs

    try:
        return chompjs.parse_js_object(text)
    except (ValueError, RecursionError) as error:
        raise StructuredDataError("bad_json", f"{what} is not JSON or a JavaScript object: "
                                              f"{str(error).splitlines()[0][:200]}") from None


def type_matches(item: Any, wanted: str | None) -> bool:
    """Whether an item's ``@type`` (or microdata's type) names ``wanted`` by its last segment."""
    if wanted is None:
        return True
    if not isinstance(item, dict):
        return False
    types = item.get("@type", item.get("type"))
    for name in types if isinstance(types, list) else [types]:
        if isinstance(name, str) and re.split(r"[/#:]", name.strip())[-1] == wanted:
            return True
    return False


def _flatten_graph(data: Any, level: int = 0) -> Iterator[dict[str, Any]]:
    """JSON-LD items: a list's elements, a ``@graph``'s items (and the object holding it, when it has more)."""
    if level > MAX_GRAPH_NESTING:
        return
    if isinstance(data, list):
        for element in data:
            yield from _flatten_graph(element, level + 1)
    elif isinstance(data, dict):
        graph = data.get("@graph")
        if graph is None:
            yield data
            return
        rest = {key: value for key, value in data.items() if key not in ("@graph", "@context")}
        if rest:
            yield rest
        yield from _flatten_graph(graph, level + 1)


_PLAIN_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


@lru_cache(maxsize=1024)
def _plain_path(expression: str) -> tuple[str, ...] | None:
    """The keys of a plain dotted path (``offers.price``), which is most paths: read without the interpreter."""
    return tuple(expression.split(".")) if _PLAIN_PATH.match(expression) else None


def search(expression: str, data: Any) -> Any:
    """JMESPath ``expression`` over ``data`` (compiled once per expression). A plain dotted path is read
    directly, with JMESPath's meaning: a key of a non-object is null."""
    keys = _plain_path(expression)
    if keys is None:
        return compile_jmespath(expression).search(data)
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
        if data is None:
            return None
    return data


def gather(results: Iterable[Any], first_only: bool) -> list[Any]:
    """JMESPath results as values: None dropped, a list's elements each a value (one level)."""
    values: list[Any] = []
    for result in results:
        if result is None:
            continue
        if isinstance(result, list):
            values.extend(element for element in result if element is not None)
        else:
            values.append(result)
        if first_only and values:
            return values[:1]
    return values


@dataclass
class PageData:
    """One page: its HTML (or JSON) and the structured data in it, each parsed on first use."""

    text: str
    url: str
    content: str = "html"
    bounds: DataBounds = field(default_factory=DataBounds)
    # what could not be read, by where it was ("jsonld", "microdata", "script:<selector>"): (kind, detail)
    unreadable: dict[str, tuple[str, str]] = field(default_factory=dict)
    _selector: Selector | None = None
    _json: Any = None
    _json_error: StructuredDataError | None = None
    _json_read: bool = False
    _jsonld: list[dict[str, Any]] | None = None
    _microdata: list[dict[str, Any]] | None = None
    _meta: dict[str, list[str]] | None = None
    _scripts: dict[str, list[Any]] = field(default_factory=dict)
    _typed: dict[tuple[str, str | None], list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def of(cls, page: PageData | Selector, url: str) -> PageData:
        """A :class:`PageData` for a parsel Selector too (extraction takes either)."""
        if isinstance(page, PageData):
            return page
        data = cls("", url, "html")
        data._selector = page
        return data

    @property
    def selector(self) -> Selector:
        if self._selector is None:
            self._selector = Selector(text=self.text or "<html></html>", base_url=self.url)
        return self._selector

    # -- a JSON response (content: json) -------------------------------------------------------------
    @property
    def json(self) -> Any:
        """The response's JSON; raises :class:`StructuredDataError` when it is not JSON or too deep."""
        if not self._json_read:
            self._json_read = True
            try:
                self.bounds.check(self.text, "the response", size=False)  # the body size cap bounds it
                self._json = json.loads(self.text)
            except StructuredDataError as error:
                self._json_error = error
            except (ValueError, RecursionError) as error:
                self._json_error = StructuredDataError("bad_json", f"the response is not JSON: {error}")
        if self._json_error is not None:
            raise self._json_error
        return self._json

    # -- JSON-LD --------------------------------------------------------------------------------------
    def jsonld_items(self) -> list[dict[str, Any]]:
        if self._jsonld is None:
            items: list[dict[str, Any]] = []
            if self.text and self._selector is None:  # the raw page: no document tree needed
                blocks = [match.group(1) for match in _JSONLD_SCRIPT.finditer(self.text)]
            else:
                blocks = [script.xpath("string()").get() or "" for script in self.selector.xpath(JSONLD_XPATH)]
            for index, text in enumerate(blocks, start=1):
                if not text.strip():
                    continue
                try:
                    data = parse_json_text(text, self.bounds, f"JSON-LD block {index}")
                except StructuredDataError as error:
                    self.unreadable.setdefault("jsonld", (error.kind, error.detail))
                    continue
                items.extend(_flatten_graph(data))
            self._jsonld = items
        return self._jsonld

    # -- microdata (extruct) --------------------------------------------------------------------------
    def microdata_items(self) -> list[dict[str, Any]]:
        if self._microdata is None:
            try:
                import extruct

                found = extruct.extract(self.selector.root, base_url=self.url, syntaxes=["microdata"],
                                        uniform=True, errors="strict")
                self._microdata = [item for item in found.get("microdata", []) if isinstance(item, dict)]
            except (ValueError, TypeError, RecursionError) as error:  # markup extruct cannot walk
                self.unreadable["microdata"] = ("bad_data", f"microdata could not be read: {type(error).__name__}: "
                                                            f"{error}")
                self._microdata = []
        return self._microdata

    def typed_items(self, kind: str, wanted: str | None) -> list[dict[str, Any]]:
        """The page's JSON-LD or microdata items of one ``@type`` (every item for None), filtered once."""
        cached = self._typed.get((kind, wanted))
        if cached is None:
            items = self.jsonld_items() if kind == "jsonld" else self.microdata_items()
            cached = self._typed[(kind, wanted)] = [item for item in items if type_matches(item, wanted)]
        return cached

    # -- <meta> names (OpenGraph, Twitter cards, description...) --------------------------------------
    def meta(self) -> dict[str, list[str]]:
        if self._meta is None:
            names: dict[str, list[str]] = {}
            for element in self.selector.xpath("//meta[@content]"):
                attributes = element.attrib
                name = attributes.get("property") or attributes.get("name")
                if name:
                    names.setdefault(name.strip().lower(), []).append(attributes.get("content", ""))
            self._meta = names
        return self._meta

    # -- <script> data ----------------------------------------------------------------------------------
    def script_data(self, script_selector: str) -> list[Any]:
        """The data of every ``<script>`` the selector matches (JSON, or a JavaScript object literal)."""
        if script_selector not in self._scripts:
            expression = script_selector.strip()
            nodes = (self.selector.xpath(expression[len(XPATH_PREFIX):]) if expression.startswith(XPATH_PREFIX)
                     else self.selector.css(expression))
            found: list[Any] = []
            for index, node in enumerate(nodes, start=1):
                text = node.root if isinstance(node.root, str) else (node.xpath("string()").get() or "")
                if not text.strip():
                    continue
                what = f"script {index} of {script_selector!r}"
                javascript = not text.lstrip().startswith(("{", "["))
                try:
                    found.append(parse_json_text(text, self.bounds, what, javascript=javascript))
                except StructuredDataError as error:
                    self.unreadable.setdefault(f"script:{script_selector}", (error.kind, error.detail))
            self._scripts[script_selector] = found
        return self._scripts[script_selector]

    # -- one structured selector over this page ---------------------------------------------------------
    def structured_values(self, kind: str, spec: Any, first_only: bool) -> list[Any]:
        """The values a jsonld, microdata, meta or script_json selector gives on this page."""
        if kind in ("jsonld", "microdata"):
            path: StructuredPath = spec
            candidates = self.typed_items(kind, path.type)
            return gather((search(path.path, item) for item in candidates), first_only)
        if kind == "meta":
            return gather([search(meta_expression(spec), self.meta())], first_only)
        if kind == "script_json":
            return gather((search(spec.path, data) for data in self.script_data(spec.script)), first_only)
        raise ValueError(f"not a structured selector kind: {kind}")

    def unreadable_for(self, kind: str, spec: Any) -> tuple[str, str] | None:
        """Why the data a selector reads could not be read on this page (kind, detail), if it could not."""
        where = f"script:{spec.script}" if kind == "script_json" else kind
        return self.unreadable.get(where)
