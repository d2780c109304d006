"""robots.txt read as RFC 9309 and Google's parser read it: user-agent matching, groups, long lines,
encodings, against Google's own test cases (``../shared/corpora/robots``) when present."""

from __future__ import annotations

import base64
import json

import pytest
from harvester.scraping.fetching.charsets import decode_document
from harvester.scraping.fetching.robots import MAX_LINE_BYTES, RobotsRules, as_google_reads, user_agent_token
from harvester.scraping.fetching.robots_matching import escape_pattern

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


# Google's parser percent-encodes a pattern's non-ASCII bytes and upper-cases its escapes, decodes nothing,
# and compares the URL's path as it is given (protego decoded and re-encoded both sides): one case each of
# Google's ID_Encoding test that protego answered the other way.
@pytest.mark.parametrize(("pattern", "url", "expected"), [
    ("/foo/bar/\u30c4", "http://foo.bar/foo/bar/\u30c4", False),  # the pattern is escaped, the path is not
    ("/foo/bar/\u30c4", "http://foo.bar/foo/bar/%E3%83%84", True),
    ("/foo/bar/%E3%83%84", "http://foo.bar/foo/bar/\u30c4", False),
    ("/foo/bar/%e3%83%84", "http://foo.bar/foo/bar/%E3%83%84", True),  # escapes compared in upper case
    ("/foo/bar/%62%61%7A", "http://foo.bar/foo/bar/baz", False),  # an escape is never decoded
    ("/foo/bar/%62%61%7A", "http://foo.bar/foo/bar/%62%61%7A", True),
])
def test_a_pattern_is_matched_byte_wise_as_google_escapes_it(pattern: str, url: str, expected: bool) -> None:
    body = f"User-agent: FooBot\nDisallow: /\nAllow: {pattern}\n".encode()
    assert allowed(body, "FooBot", url) is expected


def test_escape_pattern_is_googles_maybe_escape_pattern() -> None:
    assert escape_pattern("/SanJos\u00e9Sellers") == "/SanJos%C3%A9Sellers"
    assert escape_pattern("/a%aa%2f%zz%") == "/a%AA%2F%zz%"


def test_googles_robots_cases() -> None:
    cases = json.loads(corpus_file("robots/google-robotstxt-cases.json").read_text())
    wrong = [(case["test"], case["line"]) for case in cases
             if case["kind"] == "allowed"
             and allowed(base64.b64decode(case["robots_txt_b64"]), case["user_agent"], case["url"])
             != case["expected_allowed"]]
    assert wrong == []
