"""When a rendered page is ready, and the actions before it is read (DESIGN.md section 12).

A page is read when it is ready: when the source's ``browser.wait_for`` holds (a selector visible or attached,
the network idle, a delay), or by default when every ``required`` attribute's selector matches a non-empty value
(a detail page) or a link selector matches (a listing page), within ``browser.wait_timeout``. No peer waits for
what the user declared required; it is what a page's ``required`` means.

Selectors are the attributes' (CSS or ``xpath:``), turned into XPath by parsel's own translator and evaluated by
the page (``document.evaluate``), so the browser waits for exactly what extraction reads. An XPath the browser
cannot evaluate (an lxml extension function) does not hold readiness back.

Actions (``scroll``, ``click``, ``dismiss``, ``wait``) run in order after ``load`` and before the wait, each
bounded in count and time; the page "grows" when a listing's links (else its elements) become more.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harvester.config import (
    ELEMENT_SELECTOR_KINDS,
    JSON_PREFIX,
    XPATH_PREFIX,
    Action,
    Attribute,
    ClickSpec,
    DelayWait,
    DismissSpec,
    NetworkIdleWait,
    RecordItem,
    ScrollSpec,
    SelectorWait,
    SourceConfig,
)

if TYPE_CHECKING:
    from playwright.async_api import Page

log = logging.getLogger(__name__)
_PSEUDO_ELEMENT = re.compile(r"::(?:text|attr\([^)]*\))")
_TRAILING_NODE_TEST = re.compile(r"/(?:text\(\)|@[\w:.-]+)\s*$")
# One call reads a page when it is ready: resolves with the page's HTML (as page.content() serialises it) once the
# condition holds, looking at every DOM change and every 50 ms, or with null at the deadline. The condition is the
# default rule: each XPath (all of them, or any one) finds a node with non-blank text (an XPath the page cannot
# evaluate, an lxml extension, is left out); with a wait_for selector, that selector's state (attached, or visible
# as Playwright means it) as well.
READ_WHEN_READY_JS = """async ({xpaths, any, element, state, timeoutMs}) => {
  const nodes = (xpath) => document.evaluate(xpath, document, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null);
  const shows = (node) => node.checkVisibility ? node.checkVisibility({visibilityProperty: true})
    : node.getClientRects().length > 0;
  const matches = (xpath) => {
    let result;
    try { result = nodes(xpath); } catch (error) { return null; }
    for (let i = 0; i < result.snapshotLength; i++) {
      const node = result.snapshotItem(i);
      const text = node.nodeType === 2 ? node.value : node.textContent;
      if (text && text.trim()) return true;
    }
    return false;
  };
  const elementHolds = () => {
    let result;
    try { result = nodes(element); } catch (error) { return true; }
    for (let i = 0; i < result.snapshotLength; i++) {
      const node = result.snapshotItem(i);
      if (state === 'attached' || (node.nodeType === 1 && shows(node))) return true;
    }
    return false;
  };
  const holds = () => {
    if (element && !elementHolds()) return false;
    const found = xpaths.map(matches).filter((value) => value !== null);
    return found.length === 0 || (any ? found.some(Boolean) : found.every(Boolean));
  };
  const read = () => (document.doctype ? new XMLSerializer().serializeToString(document.doctype) : '')
    + (document.documentElement ? document.documentElement.outerHTML : '');
  if (holds()) return read();
  return await new Promise((resolve) => {
    const deadline = performance.now() + timeoutMs;
    let done = false;
    const finish = (value) => {
      if (done) return;
      done = true; observer.disconnect(); clearInterval(timer); resolve(value);
    };
    const look = () => { if (holds()) finish(read()); else if (performance.now() >= deadline) finish(null); };
    const observer = new MutationObserver(look);
    observer.observe(document, {childList: true, subtree: true, characterData: true, attributes: true});
    const timer = setInterval(look, 50);
  });
}"""
MISSING_JS = """(xpaths) => xpaths.map((xpath) => {
  try {
    const result = document.evaluate(xpath, document, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null);
    for (let i = 0; i < result.snapshotLength; i++) {
      const node = result.snapshotItem(i);
      const text = node.nodeType === 2 ? node.value : node.textContent;
      if (text && text.trim()) return false;
    }
    return true;
  } catch (error) { return false; }
})"""
SIZE_JS = """(xpaths) => {
  if (!xpaths.length) return document.getElementsByTagName('*').length;
  let total = 0;
  for (const xpath of xpaths) {
    try {
      total += document.evaluate(xpath, document, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null).snapshotLength;
    }
    catch (error) { /* not evaluable here */ }
  }
  return total;
}"""
GREW_JS = f"([xpaths, before]) => ({SIZE_JS})(xpaths) > before"


def selector_xpath(selector: str) -> str:
    """An attribute selector (CSS with parsel's pseudo-elements, or ``xpath:...``) as the XPath parsel runs."""
    from parsel.csstranslator import css2xpath

    if selector.startswith(XPATH_PREFIX):
        return selector[len(XPATH_PREFIX):]
    return css2xpath(selector)


def _notation(fields: Attribute | RecordItem) -> str:
    """A css/xpath selector of an attribute or record item, in the attributes' one-line notation."""
    return fields.css if fields.css is not None else XPATH_PREFIX + str(fields.xpath)


def element_selector(selector: str) -> str:
    """A Playwright selector for the ELEMENTS of an attribute selector (its ``::text``/``::attr()`` dropped)."""
    if selector.startswith(XPATH_PREFIX):
        return "xpath=" + _TRAILING_NODE_TEST.sub("", selector[len(XPATH_PREFIX):])
    return "xpath=" + selector_xpath(_PSEUDO_ELEMENT.sub("", selector))


class NotReady(Exception):
    """The page was not ready within the wait timeout; the message says what it waited for."""


@dataclass(frozen=True)
class Readiness:
    """What one page of one source waits for before it is read."""

    source: SourceConfig
    kind: str  # listing | details

    @property
    def timeout_ms(self) -> float:
        return self.source.browser.wait_timeout * 1000

    def default_rule(self) -> tuple[list[tuple[str, str]], bool]:
        """(name, selector) pairs of the default rule and whether any one (a listing's links or record items) or
        all (required attributes) must match. Only element selectors (css, xpath) take part: structured data
        (jsonld, microdata, meta, script_json) and JSON are read from what the page has by then."""
        listing = self.source.listing
        if self.kind == "listing" and listing is not None:
            pairs = [("link", selector) for selector in self._element_links()]
            records = listing.records
            if records is not None and records.item.kind in ELEMENT_SELECTOR_KINDS:
                pairs.append(("record item", _notation(records.item)))
            return pairs, True
        required = [(name, _notation(attribute)) for name, attribute in self.source.attributes.items()
                    if attribute.required and attribute.kind in ELEMENT_SELECTOR_KINDS]
        return required, False

    def _element_links(self) -> list[str]:
        listing = self.source.listing
        links = listing.link_selectors if listing is not None else []
        return [selector for selector in links if not selector.strip().startswith(JSON_PREFIX)]

    def growth_xpaths(self) -> list[str]:
        """What "the page grew" counts: the listing's links on a listing page, else every element."""
        if self.kind == "listing":
            return [selector_xpath(selector) for selector in self._element_links()]
        return []

    @property
    def reads_in_page(self) -> bool:
        """Whether the page itself says when it is ready (a selector, or the default rule with something to wait
        for): then, after ``load`` (and a ``network_idle`` or delay wait), one call waits and reads it. The
        default rule holds beside every ``wait_for``: a page read before its required attributes came would
        only be rejected for them."""
        return isinstance(self.source.browser.wait_for, SelectorWait) or bool(self.default_rule()[0])

    async def read_when_ready(self, page: Page) -> str:
        """The page's HTML once it is ready; raise :class:`NotReady` naming what did not hold in time."""
        wait_for = self.source.browser.wait_for
        selectors, any_one = self.default_rule()
        spec = {"xpaths": [selector_xpath(selector) for _, selector in selectors], "any": any_one,
                "element": None, "state": "attached", "timeoutMs": self.timeout_ms}
        if isinstance(wait_for, SelectorWait):
            spec.update(element=element_selector(wait_for.selector)[len("xpath="):], state=wait_for.state)
        html = await page.evaluate(READ_WHEN_READY_JS, spec)
        if html is None:
            raise NotReady(await self._not_ready(page))
        return str(html)

    async def _not_ready(self, page: Page) -> str:
        seconds = f"{self.source.browser.wait_timeout:g}s"
        wait_for = self.source.browser.wait_for
        selectors, any_one = self.default_rule()
        waited = f"{wait_for.describe()} and " if wait_for is not None and selectors else ""
        if not selectors and wait_for is not None:
            return f"not ready: waited {seconds} for {wait_for.describe()}"
        if any_one:
            return (f"not ready: waited {seconds} for {waited}a link "
                    f"({', '.join(selector for _, selector in selectors)})")
        missing = await page.evaluate(MISSING_JS, [selector_xpath(selector) for _, selector in selectors])
        absent = [f"{name} ({selector})" for (name, selector), gone in zip(selectors, missing, strict=True) if gone]
        if not absent and wait_for is not None:
            return f"not ready: waited {seconds} for {wait_for.describe()}"
        return (f"not ready: waited {seconds} for {waited}every required attribute; {', '.join(absent) or 'some'} "
                "did not appear")

    async def wait(self, page: Page) -> None:
        """After ``load``: the waits the page cannot say itself (the network idle, a delay)."""
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        wait_for = self.source.browser.wait_for
        try:
            if isinstance(wait_for, NetworkIdleWait):
                await page.wait_for_load_state("networkidle", timeout=self.timeout_ms)
            elif isinstance(wait_for, DelayWait):
                await page.wait_for_timeout(wait_for.delay_ms)
        except PlaywrightTimeout:
            raise NotReady(await self._not_ready(page)) from None


# -- actions ---------------------------------------------------------------------------------------------
async def run_actions(page: Page, actions: list[Action], readiness: Readiness) -> Counter[str]:
    """Run the actions that apply to this page's kind, in order; how often each acted (``scroll``: 3)."""
    done: Counter[str] = Counter()
    growth = readiness.growth_xpaths()
    for action in actions:
        if action.on not in ("all", readiness.kind):
            continue
        try:
            if isinstance(action, ScrollSpec):
                done["scroll"] += await _scroll(page, action, growth)
            elif isinstance(action, ClickSpec):
                done["click"] += await _click(page, action, growth)
            elif isinstance(action, DismissSpec):
                done["dismiss"] += await _dismiss(page, action)
            else:
                await page.wait_for_timeout(action.ms)
                done["wait"] += 1
        except Exception as error:  # a page that navigated away or closed mid-action: read what there is
            log.info("action %s stopped: %s", action.kind, str(error).splitlines()[0] if str(error) else error)
            done[f"{action.kind}_failed"] += 1
    return done


async def _grew(page: Page, growth: list[str], before: int, wait_ms: int) -> bool:
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    try:
        await page.wait_for_function(GREW_JS, arg=[growth, before], timeout=max(wait_ms, 1))
    except PlaywrightTimeout:
        return False
    return True


async def _scroll(page: Page, action: ScrollSpec, growth: list[str]) -> int:
    """Scroll to the bottom until the page stops growing, at most ``max`` times; returns the scrolls that grew it."""
    grew = 0
    for _ in range(action.max):
        before = await page.evaluate(SIZE_JS, growth)
        await page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        if not await _grew(page, growth, before, action.wait_ms):
            break
        grew += 1
    return grew


async def _click(page: Page, action: ClickSpec, growth: list[str]) -> int:
    """Click while the element is there and visible, at most ``max`` times; returns the clicks made."""
    target = page.locator(element_selector(action.selector)).first
    clicks = 0
    for _ in range(action.max):
        if not await target.is_visible():
            break
        before = await page.evaluate(SIZE_JS, growth)
        await target.click(timeout=max(action.wait_ms, 1000))
        clicks += 1
        await _grew(page, growth, before, action.wait_ms)
    return clicks


async def _dismiss(page: Page, action: DismissSpec) -> int:
    """Click once if it shows within ``wait_ms``; 1 when it did."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    target = page.locator(element_selector(action.selector)).first
    if action.wait_ms:
        try:
            await target.wait_for(state="visible", timeout=action.wait_ms)
        except PlaywrightTimeout:
            return 0
    elif not await target.is_visible():
        return 0
    await target.click(timeout=2000)
    return 1
