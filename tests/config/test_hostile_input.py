"""Hand-written YAML that used to break the loader: alias loops and bombs, values the YAML
constructors cannot build, reserved field names, list keys, placeholders that dump settings, and
follow patterns that backtrack for ever."""

from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path

import pytest
from harvester.config.loader import load_sources
from harvester.settings import get_settings

from tests.config.helpers import MINIMAL, one_problem, problems, source

pytestmark = pytest.mark.unit

ERROR_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?P<field>[^:]+): (?P<reason>.+)$")
LISTING = 'listing:\n  link_selectors: ["a.product"]\n'

# Nine levels of nine aliases each: 9**9 (387 million) strings once expanded, from 437 bytes.
ALIAS_BOMB = textwrap.dedent("""\
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    """)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


# -- YAML aliases -------------------------------------------------------------------------------------
def test_an_alias_that_refers_to_itself_is_a_problem_not_a_recursion_error() -> None:
    problem = one_problem(MINIMAL + "description: &loop [1, *loop]\n")
    assert problem.line == 6 and "refers to itself" in problem.reason


def test_a_merge_key_that_merges_its_own_mapping_is_a_problem() -> None:
    problem = one_problem(MINIMAL + "rate_limit: &limits\n  <<: *limits\n")
    assert problem.line == 6 and "refers to itself" in problem.reason


def test_an_alias_bomb_fails_fast_with_its_reason() -> None:
    started = time.perf_counter()
    found = problems(MINIMAL + "description:\n" + textwrap.indent(ALIAS_BOMB, "  "))
    elapsed = time.perf_counter() - started
    assert len(found) == 1 and "aliases expand" in found[0].reason, [str(problem) for problem in found]
    assert elapsed < 5, f"the alias bomb took {elapsed:.1f}s"  # it took minutes and gigabytes before


def test_a_merge_key_bomb_fails_fast() -> None:
    levels = ["  l0: &l0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"]
    for level in range(1, 9):
        merged = ", ".join(f"*l{level - 1}" for _ in range(9))
        levels.append(f"  l{level}: &l{level}\n    <<: [{merged}]\n    k{level}: {level}")
    started = time.perf_counter()
    found = problems(MINIMAL + "headers:\n" + "\n".join(levels) + "\n")
    assert any("aliases expand" in problem.reason for problem in found), [str(problem) for problem in found]
    assert time.perf_counter() - started < 5


def test_ordinary_anchors_still_work() -> None:
    config = source(MINIMAL + '  a: &price {css: ".p::text", type: float}\n  b: *price\n  c: *price\n')
    assert config.attributes["c"].type == "float"


def test_a_value_the_yaml_constructor_cannot_build_is_that_files_problem(tmp_path: Path) -> None:
    """A date that does not exist made PyYAML raise ValueError out of load_sources()."""
    write(tmp_path, "a_good.yaml", MINIMAL.replace("shop", "good"))
    bad = write(tmp_path, "b_bad.yaml", MINIMAL.replace("shop", "bad") + "description: 2024-02-30\n")
    looping = write(tmp_path, "c_loop.yaml", MINIMAL.replace("shop", "loop") + "description: &x [*x]\n")
    write(tmp_path, "d_good.yaml", MINIMAL.replace("shop", "other"))
    result = load_sources(tmp_path)
    assert sorted(result.sources) == ["good", "other"]
    assert [error.file for error in result.errors] == [str(bad), str(looping)]
    for error in result.errors:
        assert ERROR_LINE.match(str(error)), str(error)
    assert result.errors[0].line == 6 and result.errors[0].field == "description"


# -- reserved names and keys --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["first_seen_at", "harvested_at", "run_id", "_id", "url"])
def test_reserved_record_field_names_are_refused(name: str) -> None:
    problem = one_problem(MINIMAL + f'  {name}: "h2::text"\n')
    assert problem.field == "attributes" and "reserved" in problem.reason and name in problem.reason


def test_an_output_key_on_a_list_attribute_is_refused() -> None:
    problem = one_problem(MINIMAL + '  tags: {css: ".tag::text", type: "list[str]"}\noutput: {key: [tags]}\n')
    assert problem.field == "output.key" and "list" in problem.reason


def test_an_output_key_on_a_scalar_attribute_or_url_is_fine() -> None:
    config = source(MINIMAL + '  sku: ".sku::text"\noutput: {key: [sku, url]}\n')
    assert config.output.key == ["sku", "url"]


# -- placeholders -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["HARVESTER___DICT__", "HARVESTER___CLASS__", "HARVESTER_MODEL_FIELDS",
                                  "HARVESTER_MODEL_DUMP_JSON"])
def test_a_placeholder_must_name_a_declared_setting(name: str) -> None:
    problem = one_problem(MINIMAL + f"headers: {{X-Debug: '${{{name}}}'}}\n")
    assert problem.field == "headers.X-Debug" and "not a Harvester setting" in problem.reason
    assert "redis" not in problem.reason.lower()


def test_a_placeholder_outside_the_settings_is_refused_even_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARVESTER_PRIVATE_NOTE", "do not send")
    problem = one_problem(MINIMAL + "headers: {X-Note: '${HARVESTER_PRIVATE_NOTE}'}\n")
    assert "not a Harvester setting" in problem.reason


@pytest.mark.parametrize("name", ["HARVESTER_MONGO_URI", "HARVESTER_REDIS_URL"])
def test_settings_that_hold_credentials_are_not_placeholders(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "redis://127.0.0.1:1/0")
    problem = one_problem(MINIMAL + f"headers: {{X-Where: '${{{name}}}'}}\n")
    assert "credentials" in problem.reason


def test_a_placeholder_in_follow_is_matched_literally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARVESTER_DEMO_SITE_URL", "http://127.0.0.1:8008/a+b")
    get_settings.cache_clear()
    config = source(MINIMAL.replace("input:\n", "input:\n  kind: listing\n") + LISTING
                    + "  follow: '^${HARVESTER_DEMO_SITE_URL}/product/'\n")
    assert config.listing is not None
    assert config.listing.follow == r"^http://127\.0\.0\.1:8008/a\+b/product/"


# -- follow patterns ----------------------------------------------------------------------------------
def test_a_catastrophic_follow_pattern_is_fast_on_the_link_that_broke_it() -> None:
    from harvester.scraping.discovery.links import follow_matcher

    config = source(MINIMAL.replace("input:\n", "input:\n  kind: listing\n") + LISTING
                    + "  follow: '/product/(\\w+-?)+/$'\n")
    matcher = follow_matcher(config.listing.follow)
    link = "/product/" + "a" * 26 + "!"
    started = time.perf_counter()
    for _ in range(100):
        assert not matcher.search(link)
    assert time.perf_counter() - started < 2  # one search took 21 s with Python's re
    assert matcher.search("/product/blue-shoe/")


@pytest.mark.parametrize(("pattern", "why"), [
    (r"/(\\w+)/\\1", "backreference"), (r"/product/(?=\\d)", "lookaround"), (r"/product/(?<!x)\\d", "lookaround"),
])
def test_a_follow_pattern_the_linear_engine_cannot_run_is_refused(pattern: str, why: str) -> None:
    problem = one_problem(MINIMAL.replace("input:\n", "input:\n  kind: listing\n") + LISTING
                          + f'  follow: "{pattern}"\n')
    assert problem.field == "listing.follow" and "linear-time" in problem.reason


def test_xpath_regular_expression_functions_are_refused() -> None:
    """lxml runs EXSLT re:test with Python's backtracking engine."""
    problem = one_problem(MINIMAL + "  code: {xpath: \"//a[re:test(@href, '(\\\\w+-?)+$')]/text()\"}\n")
    assert problem.field == "attributes.code.xpath" and "regular expression" in problem.reason
