"""Hostile sites, round three, on the page side: the attribute cap counts attributes however a tokenizer
separates them (whitespace, ``/``, nothing after a quoted value), so libxml2's quadratic duplicate check never
sees a wide element; listing links are cut by ``max_new_urls`` before robots.txt screens them; a site cannot fill
its source's cookie jar, nor make each request carry a huge Cookie header."""

from __future__ import annotations

import time

import pytest
from harvester.scraping.extraction.markup import markup_refusal

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("separated", [
    lambda count: " ".join(f"a{n}=x" for n in range(count)),
    lambda count: "/".join(f"a{n}" for n in range(count)),
    lambda count: "".join(f'a{n}=""' for n in range(count)),
    lambda count: "".join(f"a{n}='v'" for n in range(count)),
    lambda count: "/".join(f'a{n}="v"' for n in range(count)),
], ids=["whitespace", "slash", "after_double_quotes", "after_single_quotes", "slash_after_quotes"])
def test_an_element_is_as_wide_as_its_attributes_however_they_are_separated(separated) -> None:
    """``a0=""a1=""`` and ``a0/a1`` passed the cap (it counted whitespace-separated attributes only): 120,000 of
    them kept libxml2 busy for 22 s."""
    for count, refused in ((120_000, True), (501, True), (400, False)):
        page = f"<html><body><div {separated(count)}>x</div></body></html>"
        started = time.process_time()
        reason = markup_refusal(page, 500, 300_000)
        assert (reason is not None) is refused, (count, reason)
        assert time.process_time() - started < 1.0
    assert "max_attributes_per_element" in markup_refusal(f"<p {separated(600)}>", 500, 300_000)


@pytest.mark.parametrize("page", [
    "<div " + "a" * 200_000 + "=x>",  # one long name is one attribute
    "<a href=" + "b" * 200_000 + ">",  # one long unquoted value too
    '<div class="' + " x" * 100_000 + '">',  # a quoted value is read as a value
    "<div " + " ".join(f"data-n{n}='{n}'" for n in range(450)) + ">",
])
def test_long_names_values_and_many_but_allowed_attributes_pass(page: str) -> None:
    assert markup_refusal(page, 500, 300_000) is None
