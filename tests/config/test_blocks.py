"""The ``block:`` section of a source: what passes, what fails, and where."""

from __future__ import annotations

import pytest

from tests.config.helpers import one_problem, source, with_lines

pytestmark = pytest.mark.unit


def test_block_markers_default_to_the_builtin_ones_only() -> None:
    block = source().block
    assert (block.selectors, block.texts, block.statuses, block.builtin) == ([], [], [], True)


def test_a_block_section_reads_selectors_texts_and_statuses() -> None:
    block = source(with_lines("block:", "  selectors: ['div.wall', 'xpath://form[@id=\"gate\"]']",
                              "  texts: ['Request rejected']", "  statuses: [503, 999]", "  builtin: false")).block
    assert block.selectors == ["div.wall", 'xpath://form[@id="gate"]'] and block.texts == ["Request rejected"]
    assert block.statuses == [503, 999] and block.builtin is False


@pytest.mark.parametrize(("line", "field", "reason"), [
    ("  selectors: ['div[']", "block.selectors", "not a valid selector"),
    ("  selectors: ['div.wall::text']", "block.selectors", "selects text or an attribute"),
    ("  texts: ['  ']", "block.texts", "would match every page"),
    ("  texts: ['" + "x" * 201 + "']", "block.texts", "longer than 200 characters"),
    ("  statuses: [200]", "block.statuses", "200 is not a refusal"),
    ("  statuses: [302]", "block.statuses", "302 is not a refusal"),
    ("  statuse: [503]", "block.statuse", "unknown key"),
])
def test_a_bad_block_section_names_the_field_and_the_line(line: str, field: str, reason: str) -> None:
    problem = one_problem(with_lines("block:", line))
    assert problem.field == field and reason in problem.reason and problem.line == 7, problem
