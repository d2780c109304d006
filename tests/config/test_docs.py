"""The source examples of the README and docs/sources.md are valid sources (documentation that cannot rot)."""

from __future__ import annotations

import re

import pytest
from harvester.config.loader import parse_source
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit


def readme_examples() -> list[str]:
    readme = (REPOSITORY_ROOT / "README.md").read_text()
    section = readme.split("## Add a source", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def test_the_readme_has_a_minimal_and_a_full_example() -> None:
    assert len(readme_examples()) == 2


def test_the_minimal_example_is_five_lines_and_valid() -> None:
    minimal = readme_examples()[0]
    assert len([line for line in minimal.splitlines() if line and not line.startswith("#")]) == 5
    assert parse_source(minimal, "README.md").name == "books"


def test_the_full_example_is_valid() -> None:
    full = parse_source(readme_examples()[1], "README.md")
    assert full.queue == "priority" and full.listing is not None and full.output.key == ["sku"]


def test_the_example_of_one_source_over_many_sites_is_valid() -> None:
    docs = (REPOSITORY_ROOT / "docs" / "sources.md").read_text()
    section = docs.split("## One source over many sites", 1)[1].split("\n## ", 1)[0]
    example = re.findall(r"```yaml\n(.*?)```", section, re.S)[0]
    source = parse_source(example, "docs/sources.md")
    assert source.rate_limit.per_host_max_active == 1 and source.rate_limit.per_host_per_minute == 20
    assert source.input.mongo is not None and source.input.mongo.collection == "career_pages"
