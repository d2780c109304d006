"""The ``gone:`` section of a source: how a page says its item went away while answering 200 (a soft 404).

A 404 or 410, and a redirect that leaves the item, need no configuration; a "Product not found" page that
answers 200 does, because only the site's own wording or markup tells it from a product page. A page that
matches one of these markers is not extracted: its stored record gets ``gone_at`` and keeps its last values.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from harvester.config.attributes import StrictModel, check_selector

MAX_GONE_TEXT_LENGTH = 200  # a marker is a phrase, not a page; longer ones are a mistake in the YAML


class GoneMarkers(StrictModel):
    """What a page of this source shows when its item no longer exists (the page still answers 200)."""

    selectors: list[str] = Field(
        default_factory=list,
        description="CSS (or xpath:...) selectors: a page where any matches is the page of a gone item "
                    "(e.g. .product-unavailable).")
    texts: list[str] = Field(
        default_factory=list,
        description="Phrases: a page whose title or visible text contains any (case-insensitive) is the page of "
                    "a gone item (e.g. \"Product not found\").")
    statuses: list[int] = Field(
        default_factory=lambda: [404, 410],
        description="HTTP statuses of a detail page that mean its item is gone (by default 404 and 410).")

    @field_validator("selectors")
    @classmethod
    def _selectors_compile(cls, value: list[str]) -> list[str]:
        for selector in value:
            try:
                check_selector(selector)
            except ValueError as error:
                raise ValueError(f"gone.selectors: {error}") from error
        return value

    @field_validator("texts")
    @classmethod
    def _texts_are_phrases(cls, value: list[str]) -> list[str]:
        phrases = [text.strip() for text in value]
        for phrase in phrases:
            if not phrase:
                raise ValueError("gone.texts: an empty phrase would match every page")
            if len(phrase) > MAX_GONE_TEXT_LENGTH:
                raise ValueError(f"gone.texts: a phrase of at most {MAX_GONE_TEXT_LENGTH} characters, "
                                 f"not {len(phrase)}")
        return phrases

    @field_validator("statuses")
    @classmethod
    def _statuses_are_client_errors(cls, value: list[int]) -> list[int]:
        for status in value:
            if not 400 <= status <= 499:
                raise ValueError(f"gone.statuses: {status} is not a 4xx status; a 5xx is a failing server, "
                                 f"retried, never a gone item")
        return sorted(set(value))
