"""The browser section of a source: its forms, its errors by field, and its round trip through the
registered copy every worker and slot reads (model_dump_json -> model_validate_json)."""

from __future__ import annotations

from typing import Any

import pytest
from harvester.config import ClickSpec, DelayWait, NetworkIdleWait, ScrollSpec, SelectorWait, SourceConfig
from harvester.config.loader import load_source_file
from harvester.errors import SourceConfigError

pytestmark = pytest.mark.unit


def browser_source(browser: dict[str, Any] | None = None, **overrides: Any) -> SourceConfig:
    document: dict[str, Any] = {"name": "shop", "render": "browser", "country": "SG",
                                "input": {"seeds": ["http://shop.example/1"]}, "attributes": {"title": "h1"}}
    if browser is not None:
        document["browser"] = browser
    document.update(overrides)
    return SourceConfig.model_validate(document)


def test_every_wait_for_form_and_every_action_shorthand() -> None:
    source = browser_source({
        "wait_for": {"css": "span.price"}, "wait_timeout": 5,
        "actions": [{"scroll": 3}, {"click": "button.more"}, {"dismiss": "#accept"}, {"wait": 200},
                    {"scroll": {"max": 20, "wait_ms": 1500, "on": "listing"}}]})
    assert source.browser.wait_for == SelectorWait(css="span.price", state="visible")
    assert [type(action) for action in source.browser.actions][:2] == [ScrollSpec, ClickSpec]
    assert (source.browser.actions[0].max, source.browser.actions[1].selector) == (3, "button.more")
    assert source.browser.actions[4].on == "listing" and source.browser.actions[4].max == 20
    assert browser_source({"wait_for": "network_idle"}).browser.wait_for == NetworkIdleWait()
    assert browser_source({"wait_for": {"delay_ms": 700}}).browser.wait_for == DelayWait(delay_ms=700)
    assert browser_source({"wait_for": {"xpath": "//span", "state": "attached"}}).browser.wait_for.state == "attached"
    assert browser_source().browser.wait_for is None and browser_source().browser.isolation == "visit"


def test_a_browser_section_survives_the_registered_copy() -> None:
    for browser in ({"wait_for": {"xpath": "//a", "state": "attached"}, "isolation": "task", "websockets": "allow",
                     "actions": [{"dismiss": {"selector": "#x", "wait_ms": 5, "on": "details"}}, {"wait": 3}]},
                    {"wait_for": "network_idle"}, {"wait_for": {"delay_ms": 5}}, None):
        source = browser_source(browser)
        assert SourceConfig.model_validate_json(source.model_dump_json()) == source, browser
    plain = SourceConfig.model_validate({"name": "web", "input": {"seeds": ["http://shop.example/1"]},
                                         "attributes": {"title": "h1"}})
    assert SourceConfig.model_validate_json(plain.model_dump_json()) == plain  # its default section is no section


@pytest.mark.parametrize("browser,field,reason", [
    ({"actions": [{"click": {"selector": "button", "max": 0}}]}, "browser.actions[0].click.max", "greater than"),
    ({"actions": [{"clik": "button"}]}, "browser.actions", "one key of scroll, click, dismiss, wait"),
    ({"actions": [{"click": "p[[["}]}, "browser.actions[0].click.selector", "not a valid selector"),
    ({"wait_for": {"css": "a", "xpath": "//a"}}, "browser.wait_for", "exactly one of css or xpath"),
    ({"wait_timeout": 0}, "browser.wait_timeout", "greater than 0"),
])
def test_a_bad_browser_section_names_its_field(tmp_path, browser: dict[str, Any], field: str, reason: str) -> None:
    import yaml

    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump({"name": "shop", "render": "browser", "country": "SG",
                                    "input": {"seeds": ["http://shop.example/1"]}, "attributes": {"title": "h1"},
                                    "browser": browser}))
    with pytest.raises(SourceConfigError) as raised:
        load_source_file(path)
    problem = raised.value.problems[0]
    assert problem.field.startswith(field) and reason in problem.reason, (problem.field, problem.reason)


def test_only_browser_sources_have_a_browser_section(tmp_path) -> None:
    import yaml

    path = tmp_path / "web.yaml"
    path.write_text(yaml.safe_dump({"name": "web", "input": {"seeds": ["http://shop.example/1"]},
                                    "attributes": {"title": "h1"}, "browser": {"wait_for": "network_idle"}}))
    with pytest.raises(SourceConfigError) as raised:
        load_source_file(path)
    assert raised.value.problems[0].field == "browser" and "render: browser" in raised.value.problems[0].reason
