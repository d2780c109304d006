"""Is this page a block? Challenge and denial pages told from items, on every path (HTTP and browser alike).

A WAF's challenge often answers 200: extracted like an item, it would give a record of nulls that overwrites good
stored values. So before extraction every page is held against markers, and a match makes the fetch ``blocked``
(retried with backoff, the host slowed down, never stored). The markers are

- built in, for the common challenge and interstitial pages (:data:`BUILTIN_MARKERS`): Cloudflare, Akamai,
  Imperva/Incapsula, DataDome, PerimeterX, hCaptcha/reCAPTCHA walls and a generic "Access denied";
- the source's ``block:`` section (selectors, texts, statuses);
- the process-wide ``block_markers`` setting (texts every source shares).

Cheap by construction, because it runs on every page: each built-in marker has a *hint*, a lower-case literal the
markup must contain before its pattern or selector is looked at (one ``in`` over the lowered markup), so a product
page costs one ``str.lower`` and a dozen substring searches; a selector is evaluated only when its hint is present,
on the page the extraction parses anyway. :func:`detection_cpu_ms` times it on one page for the bench.

Only the first :data:`SCAN_CHARACTERS` of the markup are searched for texts: a block page is small, and an
item page's megabyte of scripts and footer would cost more than the rest of the detection (real product pages
average 600 KB). Selectors look at the whole page.

This module reads markup only, so it lives with extraction (it imports neither fetching nor the browser, which
both call it).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from parsel import Selector

from harvester.config import XPATH_PREFIX, BlockMarkers, SourceConfig

SCAN_CHARACTERS = 65_536


@dataclass(frozen=True, slots=True)
class BuiltinMarker:
    """One kind of block page. It matches when the lowered markup contains ``hint`` and, where given, one of
    ``any_text``, a match of ``pattern`` and an element ``selector`` selects: all that are given must hold."""

    name: str
    hint: str
    pattern: re.Pattern[str] | None = None
    selector: str | None = None
    any_text: tuple[str, ...] = ()


def _pattern(expression: str) -> re.Pattern[str]:
    return re.compile(expression, re.IGNORECASE | re.DOTALL)


_TITLE = r"<title[^>]*>\s*{}\s*</title>"
_ROBOT_QUESTIONS = ("are you a robot", "not a robot", "are you human", "are you a human", "verify you are human",
                    "verify you are a human", "verify that you are human", "confirm you are human",
                    "prove you are human", "unusual traffic", "complete the security check", "solve the captcha",
                    "solve this captcha")
_CAPTCHA_WIDGET = ('.g-recaptcha, .h-captcha, iframe[src*="recaptcha"], iframe[src*="hcaptcha.com"], '
                   'script[src*="recaptcha/api"], script[src*="hcaptcha.com"]')

BUILTIN_MARKERS: tuple[BuiltinMarker, ...] = (
    BuiltinMarker("Cloudflare challenge (title 'Just a moment...')", "just a moment",
                  _pattern(_TITLE.format(r"just a moment(?:\.\.\.|…)"))),
    BuiltinMarker("Cloudflare challenge (_cf_chl_opt)", "_cf_chl_opt"),
    BuiltinMarker("Cloudflare challenge (cf-chl element)", "cf-chl-",
                  _pattern(r"""\b(?:id|class)\s*=\s*["'][^"']*\bcf-chl-""")),
    BuiltinMarker("Cloudflare block ('Attention Required! | Cloudflare')", "attention required! | cloudflare"),
    BuiltinMarker("Akamai 'Access Denied' (Reference #)", "access denied",
                  _pattern(r"reference(?:&#32;|\s)*(?:&#35;|#)\s*\d+(?:&#46;|\.)[0-9a-f]+")),
    BuiltinMarker("Imperva/Incapsula (incident ID)", "incapsula incident id"),
    BuiltinMarker("Imperva/Incapsula (challenge frame)", "_incapsula_resource",
                  selector='iframe[src*="_Incapsula_Resource"]'),
    BuiltinMarker("DataDome (captcha-delivery.com)", "captcha-delivery.com"),
    BuiltinMarker("PerimeterX (px-captcha)", "px-captcha", selector="#px-captcha"),
    BuiltinMarker("CAPTCHA wall (hCaptcha/reCAPTCHA asking for a human)", "captcha", selector=_CAPTCHA_WIDGET,
                  any_text=_ROBOT_QUESTIONS),
    BuiltinMarker("'Access denied' page", "access denied",
                  _pattern(r"<(?:title|h1)[^>]*>\s*access denied\b[^<]{0,80}</(?:title|h1)>")),
)


@dataclass(frozen=True, slots=True)
class BlockMatch:
    """What made a page a block, as the dead letter and the logs name it."""

    marker: str

    @property
    def reason(self) -> str:
        return f"block page: {self.marker}"


class BlockDetector:
    """One source's markers (its ``block:`` section, the built-ins unless it turned them off, the shared texts)."""

    def __init__(self, markers: BlockMarkers, shared_texts: Iterable[str] = ()) -> None:
        self.statuses = frozenset(markers.statuses)
        self.builtin = BUILTIN_MARKERS if markers.builtin else ()
        self.texts = tuple((text, text.lower()) for text in (*markers.texts, *shared_texts) if text.strip())
        self.selectors = tuple(markers.selectors)

    @classmethod
    def for_source(cls, source: SourceConfig, shared_texts: Iterable[str] = ()) -> BlockDetector:
        return cls(source.block, shared_texts)

    def status_block(self, status: int | None) -> BlockMatch | None:
        """A status the source names as its block (403 and 451 are blocks for every source already)."""
        if status is not None and status in self.statuses:
            return BlockMatch(f"block.statuses: HTTP {status}")
        return None

    def detect(self, text: str, parse: Callable[[], Selector] | None = None) -> BlockMatch | None:
        """The first marker ``text`` (markup) matches, or None. ``parse``: gives the page as the caller parses it
        anyway (extraction's), called only if a selector must be looked at; else the text is parsed here."""
        if not text:
            return None
        head = text[:SCAN_CHARACTERS]
        lowered = head.lower()
        for original, folded in self.texts:
            if folded in lowered:
                return BlockMatch(f"text {original!r}")
        parsed: Selector | None = None

        def page() -> Selector:
            nonlocal parsed
            if parsed is None:
                parsed = parse() if parse is not None else Selector(text=text)
            return parsed

        for marker in self.builtin:
            if marker.hint not in lowered or (marker.pattern is not None and marker.pattern.search(head) is None):
                continue
            if marker.any_text and not any(phrase in lowered for phrase in marker.any_text):
                continue
            if marker.selector is not None and not page().css(marker.selector):
                continue
            return BlockMatch(f"built-in {marker.name}")
        for selector in self.selectors:
            expression = selector.strip()
            found = (page().xpath(expression[len(XPATH_PREFIX):]) if expression.startswith(XPATH_PREFIX)
                     else page().css(expression))
            if found:
                return BlockMatch(f"selector {selector!r}")
        return None


EXAMINED_OUTCOMES = frozenset({"ok", "http_error", "parse_error"})
"""Fetches that may be blocks in disguise: a page (200), an error status a site blocks with (Cloudflare's 503
challenge) and a JSON source's HTML challenge (not JSON: a parse error). A 403 is a block already, and keeps the
reason its status gives on both paths (the HTTP fetcher does not read an error's body, the browser has it)."""


def recognise_block(detector: BlockDetector, outcome: str, status: int | None, text: str,
                    parse: Callable[[], Selector] | None = None) -> tuple[str, str] | None:
    """The ``(outcome, reason)`` a fetch must take because it is a block, or None: what both paths apply to a
    fetch before anything is extracted; the reason names the marker, so the dead letter says which wall it was."""
    if outcome not in EXAMINED_OUTCOMES:
        return None
    match = detector.status_block(status) or detector.detect(text, parse)
    if match is None:
        return None
    return "blocked", match.reason


def detection_cpu_ms(text: str, markers: BlockMarkers | None = None, repeat: int = 50) -> float:
    """CPU milliseconds one detection takes on ``text`` (the mean of ``repeat``), with the built-in markers (or
    ``markers``): what the bench sets against ``process_page``'s cost on the same page."""
    detector = BlockDetector(markers if markers is not None else BlockMarkers())
    started = time.process_time()
    for _ in range(repeat):
        detector.detect(text)
    return (time.process_time() - started) * 1000 / repeat
