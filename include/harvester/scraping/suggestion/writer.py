"""The suggested source as YAML, each choice preceded by a comment line that says why it was made."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from harvester.scraping.suggestion.choices import Choice, Suggestion


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_flow(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _attribute_lines(choices: list[Choice], indent: str, required: set[str]) -> list[str]:
    lines = []
    for choice in choices:
        spec = {**choice.spec, **({"required": True} if choice.name in required else {})}
        lines.append(f"{indent}# {choice.name}: {choice.why}" + (" (required: it keys the record)"
                                                                  if choice.name in required else ""))
        lines.append(f"{indent}{choice.name}: {_flow(spec)}")
    return lines


def render_yaml(suggestion: Suggestion, command: str) -> str:
    lines = ["# yaml-language-server: $schema=./source.schema.json",
             f"# Suggested by `{command}` on {datetime.now(UTC):%Y-%m-%d}; check it with `harvester try`.",
             *(f"# {note}" for note in suggestion.notes),
             f"name: {suggestion.name}"]
    if suggestion.content == "json":
        lines += ["# content: json: the URL answers JSON, read with json: (JMESPath) selectors", "content: json"]
    lines += [f"# render: {suggestion.render}: {suggestion.render_why}", f"render: {suggestion.render}"]
    if suggestion.country:
        lines += ["# country: the page slots' country (browser sources need one: its proxy is "
                  "AIRFLOW_CONN_PROXY_<COUNTRY>)", f"country: {suggestion.country}"]
    lines += ["input:", f"  # kind: {suggestion.kind}: "
              + ("the seed is a listing page" if suggestion.kind == "listing" else "the seed is a detail page"),
              f"  kind: {suggestion.kind}"]
    if suggestion.request_body is None:
        lines.append(f"  seeds: [{json.dumps(suggestion.url)}]")
    else:
        lines += ["  # requests: the endpoint, POSTed the sample body (a query only reads: safe_to_repeat)",
                  f"  requests: [{{url: {json.dumps(suggestion.url)}, method: POST, "
                  f"json: {_flow(suggestion.request_body)}}}]"]
    required = set(suggestion.key) - {"url"}
    if suggestion.listing is not None:
        lines.append("listing:")
        for why in suggestion.listing_why:
            lines.append(f"  # {why}")
        for key in ("link_selectors", "next_page_selectors", "follow", "max_depth"):
            if key in suggestion.listing:
                lines.append(f"  {key}: {_flow(suggestion.listing[key])}")
        if suggestion.next_rule is not None:
            rule = {("while" if key == "while_" else key): value for key, value in suggestion.next_rule.items()}
            lines.append(f"  next: {_flow(rule)}")
        if suggestion.records:
            lines += [f"  # records: {suggestion.records_why}", "  records:",
                      f"    item: {_flow(suggestion.records_item)}", "    attributes:",
                      *_attribute_lines(suggestion.records, "      ", required),
                      f"    # key: {suggestion.key_why}", f"    key: {_flow(suggestion.key)}"]
    if suggestion.attributes:
        lines += ["attributes:", *_attribute_lines(suggestion.attributes, "  ", required)]
    if not suggestion.records:
        lines += ["output:", f"  # key: {suggestion.key_why}", f"  key: {_flow(suggestion.key)}"]
    for dropped in suggestion.dropped:
        lines.append(f"# not suggested: {dropped}")
    return "\n".join(lines) + "\n"
