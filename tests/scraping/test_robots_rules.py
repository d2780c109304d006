"""robots.txt read as RFC 9309 and Google's parser read it: user-agent matching, groups, long lines,
encodings, against Google's own test cases (``../shared/corpora/robots``) when present."""

from __future__ import annotations

import base64
import json

import pytest
from harvester.scraping.fetching.charsets import decode_document
from harvester.scraping.fetching.robots import MAX_LINE_BYTES, RobotsRules, as_google_reads, user_agent_token

from tests.corpora import corpus_file

pytestmark = pytest.mark.unit
ORIGIN = "http://foo.bar"


def allowed(robots_txt: str | bytes, user_agent: str, url: str) -> bool:
    text = decode_document(robots_txt, "text/plain").text if isinstance(robots_txt, bytes) else robots_txt
    return RobotsRules(ORIGIN, text).allowed(url, user_agent)


@pytest.mark.parametrize("line", ["User-Agent: FOO BAR", "User-Agent: foo bar", "user-agent: FoO bAr"])
def test_a_user_agent_line_names_its_product_token_matched_without_case(line: str) -> None:
    """``FOO BAR`` names ``FOO``: protego looked for a crawler called "foo bar" and let Foo fetch anything."""
    assert not allowed(f"{line}\nAllow: /x/\nDisallow: /\n", "Foo", f"{ORIGIN}/a/b")
    assert allowed(f"{line}\nAllow: /x/\nDisallow: /\n", "foo", f"{ORIGIN}/x/y")


def test_a_line_of_an_unknown_key_does_not_end_a_group() -> None:
    robots_txt = "User-agent: FooBot\nInvalid-Unknown-Line: unknown\nUser-agent: *\nDisallow: /\n"
    assert not allowed(robots_txt, "FooBot", f"{ORIGIN}/")


def test_a_crawler_name_that_is_no_product_token_is_matched_by_the_star_group_only() -> None:
    robots_txt = "User-Agent: *\nDisallow: /\nUser-Agent: Foo Bar\nAllow: /x/\nDisallow: /\n"
    assert not allowed(robots_txt, "Foo Bar", f"{ORIGIN}/x/y")
    assert allowed(robots_txt, "Foo", f"{ORIGIN}/x/y")
    assert user_agent_token("Harvester/0.1.0 (+https://example.org)") == "Harvester"
    assert user_agent_token("My Crawler/1.0") == "*"


def test_a_line_longer_than_google_reads_is_cut() -> None:
    """A Disallow past the cut disallows its prefix (more, never less), as Google's parser reads it."""
    long_path = "/x/" + "a" * MAX_LINE_BYTES
    kept = long_path[: MAX_LINE_BYTES - len("disallow: ")]
    assert not allowed(f"user-agent: FooBot\ndisallow: {long_path}\n", "FooBot", f"{ORIGIN}{kept}/fux")
    assert len(as_google_reads(f"disallow: {long_path}").encode()) == MAX_LINE_BYTES


def test_a_robots_txt_in_utf16_with_a_bom_is_read() -> None:
    """The same decoding as pages: a BOM names the charset (protego saw NUL bytes between the letters)."""
    body = "\ufeffUser-agent: *\nDisallow: /private\n".encode("utf-16-le")
    assert not allowed(body, "FooBot", f"{ORIGIN}/private/1") and allowed(body, "FooBot", f"{ORIGIN}/public")


# protego reads a percent-encoded unreserved character as the character (RFC 3986 section 6.2.2.2 calls
# them the same), and a raw non-ASCII path as its UTF-8 escapes; Google's parser compares the bytes. A
# fetched URL is always percent-encoded, so only the spelling of the robots.txt differs.
PROTEGO_NORMALISES = {419, 430, 441}


def test_googles_robots_cases() -> None:
    cases = json.loads(corpus_file("robots/google-robotstxt-cases.json").read_text())
    wrong = [(case["test"], case["line"]) for case in cases
             if case["kind"] == "allowed" and case["line"] not in PROTEGO_NORMALISES
             and allowed(base64.b64decode(case["robots_txt_b64"]), case["user_agent"], case["url"])
             != case["expected_allowed"]]
    assert wrong == []
