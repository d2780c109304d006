"""A source's ``block:`` section: what tells this site's challenge or denial pages from its items.

Harvester recognises the common challenge and interstitial pages by itself (built-in markers, see
``harvester.scraping.extraction.blocks``); a site with a wall of its own names it here, by selector, by text or by
the status it answers with. A page that matches is the outcome ``blocked``: retried, never extracted or stored.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from harvester.config.attributes import StrictModel, check_selector

MAX_BLOCK_TEXT_LENGTH = 200  # a marker is a phrase of the page, not a page: longer ones are a paste error
MAX_BLOCK_MARKERS = 50  # each is checked on every page; a list this long is a mistake, not a site


class BlockMarkers(StrictModel):
    """Per-source block markers, checked on every page before extraction (HTTP and browser alike)."""

    selectors: list[str] = Field(
        default_factory=list, max_length=MAX_BLOCK_MARKERS,
        description="CSS selectors (or xpath:...) that match only on this site's block page: a page where any "
                    "matches an element is blocked.")
    texts: list[str] = Field(
        default_factory=list, max_length=MAX_BLOCK_MARKERS,
        description="Phrases of the block page (matched case-insensitively in the page's markup): a page that "
                    "contains any is blocked.")
    statuses: list[int] = Field(
        default_factory=list, max_length=MAX_BLOCK_MARKERS,
        description="HTTP statuses this site answers when it blocks (beside 403 and 451), e.g. 429 without "
                    "Retry-After, 503 or 999; never a 2xx or 3xx.")
    builtin: bool = Field(
        default=True,
        description="Whether the built-in markers of common challenge pages (Cloudflare, Akamai, Imperva, DataDome, "
                    "PerimeterX, CAPTCHA walls, 'Access denied') apply too: off only for a site one of them "
                    "mistakes for a block.")

    @field_validator("selectors")
    @classmethod
    def _selectors_compile(cls, value: list[str]) -> list[str]:
        for selector in value:
            try:
                check_selector(selector)
            except ValueError as error:
                raise ValueError(str(error)) from error
            if "::" in selector:
                raise ValueError(f"{selector!r} selects text or an attribute; a block marker "
                                 "selects an element (drop the ::text or ::attr part)")
        return value

    @field_validator("texts")
    @classmethod
    def _texts_are_phrases(cls, value: list[str]) -> list[str]:
        for text in value:
            if not text.strip():
                raise ValueError("an empty text would match every page")
            if len(text) > MAX_BLOCK_TEXT_LENGTH:
                raise ValueError(f"{text[:40]!r}... is longer than {MAX_BLOCK_TEXT_LENGTH} characters; "
                                 "name a phrase of the block page")
        return value

    @field_validator("statuses")
    @classmethod
    def _statuses_are_refusals(cls, value: list[int]) -> list[int]:
        for status in value:
            if not 400 <= status <= 999:
                raise ValueError(f"{status} is not a refusal; a blocking status is 400 to 999 "
                                 "(a block that answers 200 is named by selectors or texts)")
        return value
