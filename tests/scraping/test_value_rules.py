"""Value rules: each rule rejects a record on a required attribute and drops the value (counted) on
an optional one; rules that do not fit the type are refused when the source is validated."""

from __future__ import annotations

from typing import Any

import pytest
from harvester.config.model import SourceConfig
from harvester.scraping.extraction.extractor import extract_record, parse_html
from pydantic import ValidationError

pytestmark = pytest.mark.unit

PAGE = """<html><body><h1>Blue kettle</h1><span class="sku">SKU-00042</span><span class="price">19.90</span>
<span class="stock">7</span><time datetime="2024-03-05">March</time><span class="blank">   </span>
<a class="shop" href="/shop/kettles">shop</a><ul><li class="tag">new</li><li class="tag">sale</li></ul>
<span class="colour">blue</span></body></html>"""

# rule -> (attribute definition that breaks it on PAGE, one that passes)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "min": ({"css": ".price", "type": "float", "min": 20}, {"css": ".price", "type": "float", "min": 19.9}),
    "max": ({"css": ".stock", "type": "int", "max": 6}, {"css": ".stock", "type": "int", "max": 7}),
    "pattern": ({"css": ".sku", "pattern": "^ABC-"}, {"css": ".sku", "pattern": r"^SKU-\d{5}$"}),
    "enum": ({"css": ".colour", "enum": ["red", "green"]}, {"css": ".colour", "enum": ["red", "blue"]}),
    "min_length": ({"css": "h1", "min_length": 12}, {"css": "h1", "min_length": 11}),
    "max_length": ({"css": "h1", "max_length": 10}, {"css": "h1", "max_length": 11}),
    "not_empty": ({"css": ".absent", "default": " ", "not_empty": True},  # a blank default, or JSON's ""
                  {"css": ".sku", "not_empty": True}),
}


def extract(attributes: dict[str, Any]) -> Any:
    source = SourceConfig.model_validate({"name": "rules", "input": {"seeds": ["http://shop.test/"]},
                                          "attributes": attributes})
    return extract_record(source, parse_html(PAGE, "http://shop.test/p/1"), "http://shop.test/p/1")


@pytest.mark.parametrize("rule", sorted(CASES))
def test_a_broken_rule_rejects_a_required_attribute_and_drops_an_optional_one(rule: str) -> None:
    broken, passing = CASES[rule]
    required = extract({"value": {**broken, "required": True}, "title": "h1"})
    assert required.record is None
    assert [(problem.attribute, problem.kind, problem.required) for problem in required.rejections] == \
        [("value", rule, True)]
    assert required.values["title"] == "Blue kettle"  # what the rejected page gave is kept for the figures

    optional = extract({"value": broken, "title": "h1"})
    assert optional.record is not None and optional.record["value"] is None
    assert [(problem.kind, problem.required) for problem in optional.problems] == [(rule, False)]
    assert optional.problems[0].counter == f"{rule}:value"

    kept = extract({"value": {**passing, "required": True}})
    assert kept.record is not None and kept.record["value"] is not None and not kept.problems


def test_dates_prices_and_lists() -> None:
    result = extract({
        "released": {"css": "time::attr(datetime)", "type": "date", "min": "2024-04-01"},
        "price": {"css": ".price", "type": "price", "currency": "EUR", "max": 10},
        "tags": {"css": "li.tag", "type": "list[str]", "enum": ["new"]},
        "none": {"css": "li.tag", "type": "list[str]", "pattern": "^x", "not_empty": True, "required": True},
    })
    assert result.record is None  # every value of the required list broke its pattern
    assert result.values["released"] is None and result.values["price"] is None
    assert result.values["tags"] == ["new"]  # "sale" is dropped from the list, "new" kept
    kinds = {problem.attribute: (problem.kind, problem.required) for problem in result.problems}
    assert kinds == {"released": ("min", False), "price": ("max", False), "tags": ("enum", False),
                     "none": ("pattern", True)}


@pytest.mark.parametrize(("attribute", "message"), [
    ({"css": "x", "type": "int", "pattern": "a"}, "pattern: only str and url values match a pattern"),
    ({"css": "x", "min": 1}, "min: only numbers (int, float, price) and dates have a minimum"),
    ({"css": "x", "type": "date", "max": 3}, "max: a date attribute is bounded by an ISO 8601 date"),
    ({"css": "x", "type": "int", "min": 5, "max": 1}, "max: is below min"),
    ({"css": "x", "min_length": 5, "max_length": 2}, "max_length: is below min_length"),
    ({"css": "x", "pattern": "(a)\\1"}, "linear-time engine"),
    ({"css": "x", "type": "present", "not_empty": True}, "not_empty: a present attribute"),
    ({"css": "x", "type": "date", "min": "soon"}, "not an ISO 8601 date"),
])
def test_rules_that_do_not_fit_are_refused(attribute: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        extract({"value": attribute})


def test_a_yaml_date_bound_round_trips_through_the_registered_copy() -> None:
    import datetime

    source = SourceConfig.model_validate({"name": "rules", "input": {"seeds": ["http://shop.test/"]},
                                          "attributes": {"when": {"css": "time::attr(datetime)", "type": "date",
                                                                  "min": datetime.date(2024, 1, 1)}}})
    again = SourceConfig.model_validate_json(source.model_dump_json())
    assert again.attributes["when"].min == "2024-01-01" and again == source
