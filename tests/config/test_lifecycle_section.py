"""The ``gone:`` section: a soft 404's markers, validated with errors that name the field."""

from __future__ import annotations

import pytest

from tests.config.helpers import one_problem, source, with_lines

pytestmark = pytest.mark.unit


def test_by_default_404_and_410_mean_gone_and_no_markers_are_read() -> None:
    gone = source().gone
    assert (gone.statuses, gone.selectors, gone.texts) == ([404, 410], [], [])


def test_markers_are_read_and_trimmed() -> None:
    gone = source(with_lines("gone: {selectors: ['.unavailable', 'xpath://div[@id=\"gone\"]'],",
                             "       texts: ['  Product not found '], statuses: [410, 404, 410]}")).gone
    assert gone.selectors == [".unavailable", 'xpath://div[@id="gone"]']
    assert gone.texts == ["Product not found"] and gone.statuses == [404, 410]


@pytest.mark.parametrize(("line", "reason"), [
    ("gone: {selectors: ['div[']}", "gone.selectors"),
    ("gone: {texts: ['  ']}", "empty phrase"),
    ("gone: {texts: ['" + "x" * 201 + "']}", "at most 200"),
    ("gone: {statuses: [503]}", "not a 4xx"),
    ("gone: {statuses: [404], redirects: true}", "redirects"),
])
def test_a_bad_gone_section_names_the_field(line: str, reason: str) -> None:
    problem = one_problem(with_lines(line))
    assert "gone" in str(problem) and reason in str(problem), str(problem)


@pytest.mark.parametrize("name", ["gone_at", "gone_reason", "config_version", "requested_urls"])
def test_the_life_cycle_fields_are_reserved(name: str) -> None:
    assert "reserved" in str(one_problem(with_lines(f"  {name}: '.x'")))  # under attributes:
