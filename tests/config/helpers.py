"""Small helpers for the config tests: a minimal valid source, and the problems of a YAML text."""

from __future__ import annotations

import textwrap

from harvester.config.loader import Problem, SourceConfigError, parse_source
from harvester.config.model import SourceConfig

MINIMAL = """\
name: shop
input:
  seeds: ["https://shop.example.com/product/1"]
attributes:
  title: "h1::text"
"""


def source(text: str = MINIMAL) -> SourceConfig:
    return parse_source(textwrap.dedent(text), "shop.yaml")


def problems(text: str) -> list[Problem]:
    try:
        parse_source(textwrap.dedent(text), "shop.yaml")
    except SourceConfigError as error:
        return error.problems
    raise AssertionError("expected the source to be rejected")


def one_problem(text: str) -> Problem:
    found = problems(text)
    assert len(found) == 1, [str(problem) for problem in found]
    return found[0]


def with_lines(*lines: str) -> str:
    """MINIMAL plus extra top-level lines (a field under test)."""
    return MINIMAL + "\n".join(lines) + "\n"
