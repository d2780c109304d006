"""The JSON Schema of a source file, exported from :class:`SourceConfig` for editors.

The committed copy (``include/sources/source.schema.json``) lets an editor with the YAML language
server complete and check a source as it is typed; a test fails when the copy is stale, and
``harvester schema`` rewrites it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harvester.config.model import SourceConfig, format_duration

SCHEMA_FILE_NAME = "source.schema.json"
SCHEMA_ID = "https://harvester.local/schemas/source.schema.json"
_SHORTHAND_MODELS = ("#/$defs/StructuredPath", "#/$defs/RecordItem")


def source_json_schema() -> dict[str, Any]:
    schema = SourceConfig.model_json_schema()
    # The model accepts a plain string for an attribute (a CSS selector of a str); say so to editors.
    shorthand = {
        "anyOf": [
            {"$ref": "#/$defs/Attribute"},
            {"type": "string", "description": "Shorthand: a CSS selector (or xpath:..., json:...) of a str attribute."},
        ]
    }
    schema["properties"]["attributes"]["additionalProperties"] = shorthand
    schema["$defs"]["ListingRecords"]["properties"]["attributes"]["additionalProperties"] = shorthand
    # jsonld: "name" is a path over every item; item: "li.card" a CSS selector of the items
    for definition in schema["$defs"].values():
        for prop in definition.get("properties", {}).values():
            options = prop.get("anyOf") or ([{"$ref": prop["$ref"]}] if "$ref" in prop else [])
            if any(option.get("$ref") in (_SHORTHAND_MODELS) for option in options):
                prop.pop("$ref", None)
                prop["anyOf"] = [*options, {"type": "string", "description": "Shorthand: the path (or the CSS "
                                                                             "selector of the items)."}]
    lag = schema["properties"]["harvesting_lag"]
    lag["default"] = format_duration(SourceConfig.model_fields["harvesting_lag"].default)
    schema["properties"]["schedule"]["examples"] = ["@daily", "0 */6 * * *", None]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **schema,
        "title": "Harvester source",
        "description": "One source of Harvester: include/sources/<name>.yaml (see docs/sources.md).",
    }


def render_schema() -> str:
    return json.dumps(source_json_schema(), indent=2, sort_keys=False) + "\n"


def schema_path(directory: Path | None = None) -> Path:
    if directory is None:
        from harvester.settings import get_settings

        directory = get_settings().sources_dir
    return directory / SCHEMA_FILE_NAME


def write_schema(path: Path) -> bool:
    """Write the schema; True when the file changed."""
    text = render_schema()
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True
