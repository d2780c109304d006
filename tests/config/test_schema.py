"""The committed JSON Schema is current, accepts the examples and catches what the model catches."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from harvester.config.schema import SCHEMA_FILE_NAME, render_schema
from harvester.settings import REPOSITORY_ROOT

from tests.config.helpers import MINIMAL

pytestmark = pytest.mark.unit

SOURCES = REPOSITORY_ROOT / "include" / "sources"
SCHEMA_LINE = f"# yaml-language-server: $schema=./{SCHEMA_FILE_NAME}"


def committed_schema() -> dict:
    return json.loads((SOURCES / SCHEMA_FILE_NAME).read_text())


def test_the_committed_schema_is_current() -> None:
    assert (SOURCES / SCHEMA_FILE_NAME).read_text() == render_schema(), (
        "include/sources/source.schema.json is stale: run `harvester schema` and commit it"
    )


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(committed_schema())


@pytest.mark.parametrize("path", sorted(SOURCES.glob("*.yaml")), ids=lambda path: path.name)
def test_every_example_points_editors_at_the_schema_and_passes_it(path: Path) -> None:
    text = path.read_text()
    assert text.splitlines()[0] == SCHEMA_LINE
    jsonschema.Draft202012Validator(committed_schema()).validate(yaml.safe_load(text))


def test_the_schema_accepts_the_minimal_source_and_rejects_typos() -> None:
    validator = jsonschema.Draft202012Validator(committed_schema())
    validator.validate(yaml.safe_load(MINIMAL))
    assert not validator.is_valid(yaml.safe_load(MINIMAL + "schedul: '@daily'\n"))
    assert not validator.is_valid(yaml.safe_load(MINIMAL + "  price: {css: x, type: money}\n"))
    assert not validator.is_valid(yaml.safe_load(MINIMAL + "harvesting_lag: soon\n"))
