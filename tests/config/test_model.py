"""One small test per rule of a source file (DESIGN.md section 3): what passes, what fails, and where."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.config.helpers import MINIMAL, one_problem, problems, source, with_lines

pytestmark = pytest.mark.unit

LISTING = """\
listing:
  link_selectors: ["a.product::attr(href)"]
"""


def test_a_minimal_source_is_five_lines_and_gets_defaults() -> None:
    assert len(MINIMAL.strip().splitlines()) == 5
    config = source()
    assert config.schedule == "@daily"
    assert config.priority == "normal" and config.queue == "default"
    assert config.render == "http"
    assert config.rate_limit.max_active == 4 and config.rate_limit.per_minute == 120
    assert config.batch.size == 100 and config.batch.max_packages == 100
    assert config.harvesting_lag == timedelta(days=1)
    assert config.input.kind == "details"
    assert config.attributes["title"].css == "h1::text" and config.attributes["title"].type == "str"
    assert config.output.key == ["url"] and config.output_collection == "shop"
    assert config.retries == 3 and config.timeout == 30.0
    assert config.blocked_resource_types == ["image", "font", "media"]


# -- name ---------------------------------------------------------------------------------------------
def test_name_is_required() -> None:
    problem = one_problem(MINIMAL.replace("name: shop\n", ""))
    assert (problem.field, problem.reason) == ("name", "required field is missing")


@pytest.mark.parametrize("name", ["Shop", "1shop", "shop-eu", "a" * 64])
def test_name_must_be_a_lower_case_identifier(name: str) -> None:
    problem = one_problem(MINIMAL.replace("name: shop", f"name: {name}"))
    assert problem.field == "name" and problem.line == 1


# -- unknown keys -------------------------------------------------------------------------------------
def test_an_unknown_top_level_key_is_an_error_listing_the_allowed_keys() -> None:
    problem = one_problem(with_lines('schedul: "@hourly"'))
    assert problem.field == "schedul" and problem.line == 6
    assert "unknown key" in problem.reason and "schedule" in problem.reason


def test_an_unknown_nested_key_is_an_error() -> None:
    problem = one_problem(with_lines("rate_limit:", "  max_actve: 3"))
    assert problem.field == "rate_limit.max_actve" and problem.line == 7
    assert "max_active" in problem.reason


# -- schedule -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", ['"@hourly"', '"@once"', '"*/15 * * * *"', '"0 2 * * 1-5"', "null"])
def test_schedule_accepts_cron_presets_and_null(schedule: str) -> None:
    source(with_lines(f"schedule: {schedule}"))


@pytest.mark.parametrize("schedule", ['"every day"', '"@sometimes"', '"61 * * * *"', "5"])
def test_schedule_rejects_what_is_neither_cron_nor_preset(schedule: str) -> None:
    assert one_problem(with_lines(f"schedule: {schedule}")).field == "schedule"


# -- priority, render, country ------------------------------------------------------------------------
def test_high_priority_goes_to_the_priority_queue() -> None:
    assert source(with_lines("priority: high")).queue == "priority"


def test_priority_is_high_or_normal() -> None:
    problem = one_problem(with_lines("priority: urgent"))
    assert problem.field == "priority" and "'high' or 'normal'" in problem.reason


def test_render_is_http_or_browser() -> None:
    assert one_problem(with_lines("render: curl")).field == "render"


def test_a_browser_source_needs_a_country() -> None:
    problem = one_problem(with_lines("render: browser"))
    assert problem.field == "country" and "page slots" in problem.reason


def test_a_browser_source_is_served_by_the_page_slot_workers() -> None:
    browser = source(with_lines("render: browser", "country: SG"))
    assert browser.queue == "pageslots" and browser.country == "SG"  # the country travels on each task


def test_country_is_an_upper_case_two_letter_code() -> None:
    assert one_problem(with_lines("render: browser", "country: sg")).field == "country"


# -- rate limit and batch -----------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["max_active", "per_minute"])
def test_rate_limits_are_at_least_one(field: str) -> None:
    problem = one_problem(with_lines("rate_limit:", f"  {field}: 0"))
    assert problem.field == f"rate_limit.{field}" and problem.line == 7


def test_per_host_limit_cannot_exceed_the_source_limit() -> None:
    problem = one_problem(with_lines("rate_limit: {max_active: 2, per_host_max_active: 3}"))
    assert problem.field == "rate_limit.per_host_max_active"


@pytest.mark.parametrize("value", [0, 10_001])
def test_batch_size_is_between_1_and_10000(value: int) -> None:
    assert one_problem(with_lines(f"batch: {{size: {value}}}")).field == "batch.size"


def test_max_packages_is_at_least_one() -> None:
    assert one_problem(with_lines("batch: {max_packages: 0}")).field == "batch.max_packages"


# -- harvesting lag -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("6h", timedelta(hours=6)), ("7d", timedelta(days=7)), ("15m", timedelta(minutes=15)),
    ("2w", timedelta(weeks=2)), ("90", timedelta(seconds=90)),
])
def test_harvesting_lag_reads_durations(text: str, expected: timedelta) -> None:
    assert source(with_lines(f"harvesting_lag: {text}")).harvesting_lag == expected


@pytest.mark.parametrize("text", ["soon", "6 hours", "-5", "1y"])
def test_harvesting_lag_rejects_what_is_not_a_duration(text: str) -> None:
    problem = one_problem(with_lines(f"harvesting_lag: {text}"))
    assert problem.field == "harvesting_lag" and "duration" in problem.reason


# -- input --------------------------------------------------------------------------------------------
def test_input_needs_seeds_or_mongo() -> None:
    problem = one_problem(MINIMAL.replace('  seeds: ["https://shop.example.com/product/1"]', "  seeds: []"))
    assert problem.field == "input" and "seeds or mongo" in problem.reason


@pytest.mark.parametrize("url", ["ftp://shop.example.com/x", "/product/1", "shop.example.com"])
def test_seeds_are_absolute_http_urls(url: str) -> None:
    problem = one_problem(MINIMAL.replace("https://shop.example.com/product/1", url))
    assert problem.field == "input.seeds" and problem.line == 3


def test_a_seed_listed_twice_is_an_error() -> None:
    text = MINIMAL.replace('["https://shop.example.com/product/1"]', '["https://a.example/1", "https://a.example/1"]')
    assert "twice" in one_problem(text).reason


def test_input_from_mongo() -> None:
    config = source(MINIMAL.replace('  seeds: ["https://shop.example.com/product/1"]',
                                    "  mongo: {collection: inputs, filter: {active: true}, url_field: link}"))
    assert config.input.mongo is not None and config.input.mongo.filter == {"active": True}
    assert config.input.mongo.url_field == "link" and config.input.mongo.connection_id == "mongo_default"


def test_a_mongo_input_needs_a_collection() -> None:
    text = MINIMAL.replace('  seeds: ["https://shop.example.com/product/1"]', "  mongo: {url_field: link}")
    assert one_problem(text).field == "input.mongo.collection"


# -- listing ------------------------------------------------------------------------------------------
def test_a_listing_section_makes_the_input_listing_pages() -> None:
    config = source(MINIMAL + LISTING)
    assert config.input.kind == "listing" and config.listing is not None and config.listing.max_depth == 2


def test_listing_input_needs_a_listing_section() -> None:
    problem = one_problem(MINIMAL.replace("input:\n", "input:\n  kind: listing\n"))
    assert problem.field == "listing" and "which links to follow" in problem.reason


def test_details_input_with_a_listing_section_is_contradictory() -> None:
    problem = one_problem(MINIMAL.replace("input:\n", "input:\n  kind: details\n") + LISTING)
    assert problem.field == "input.kind"


def test_listing_needs_link_selectors() -> None:
    assert one_problem(MINIMAL + "listing: {link_selectors: []}\n").field == "listing.link_selectors"


def test_listing_follow_must_be_a_regular_expression() -> None:
    problem = one_problem(MINIMAL + LISTING + '  follow: "/product/(\\\\d+"\n')
    assert problem.field == "listing.follow" and "regular expression" in problem.reason


def test_listing_depth_is_not_negative() -> None:
    assert one_problem(MINIMAL + LISTING + "  max_depth: -1\n").field == "listing.max_depth"


def test_listing_selectors_must_compile() -> None:
    problem = one_problem(MINIMAL + 'listing: {link_selectors: ["a[[href"]}\n')
    assert problem.field == "listing.link_selectors" and "not a valid selector" in problem.reason


# -- attributes ---------------------------------------------------------------------------------------
def test_attributes_are_required() -> None:
    assert one_problem(MINIMAL.replace('attributes:\n  title: "h1::text"\n', "attributes: {}\n")).field == "attributes"


def test_attribute_shorthand_css_and_xpath() -> None:
    config = source(MINIMAL + '  price: "xpath://span[@class=\'price\']/text()"\n')
    assert config.attributes["price"].xpath == "//span[@class='price']/text()"
    assert config.attributes["title"].css == "h1::text"


@pytest.mark.parametrize("kind", ["str", "int", "float", "bool", "date", "url", "list[str]", "list[int]"])
def test_attribute_types(kind: str) -> None:
    assert source(MINIMAL + f'  value: {{css: ".v::text", type: "{kind}"}}\n').attributes["value"].type == kind


def test_an_unknown_attribute_type_is_an_error() -> None:
    problem = one_problem(MINIMAL + '  price: {css: ".price::text", type: money}\n')
    assert problem.field == "attributes.price.type" and problem.line == 6


def test_an_attribute_has_exactly_one_selector() -> None:
    assert one_problem(MINIMAL + '  price: {css: "a", xpath: "//a"}\n').field == "attributes.price"
    assert one_problem(MINIMAL + "  price: {type: float}\n").field == "attributes.price"


def test_an_attribute_selector_must_compile() -> None:
    assert one_problem(MINIMAL + '  price: {xpath: "//span[@"}\n').field == "attributes.price.xpath"


def test_required_attribute() -> None:
    assert source(MINIMAL + '  sku: {css: ".sku::text", required: true}\n').attributes["sku"].required


def test_attribute_names_are_field_names() -> None:
    assert one_problem(MINIMAL + '  "bad name": "h2::text"\n').field == "attributes"
    assert one_problem(MINIMAL + '  url: "a::attr(href)"\n').field == "attributes"


# -- output -------------------------------------------------------------------------------------------
def test_output_key_fields_must_exist() -> None:
    problem = one_problem(with_lines("output: {key: [sku]}"))
    assert problem.field == "output.key" and "'sku'" in problem.reason


def test_output_collection_and_key() -> None:
    config = source(MINIMAL + '  sku: ".sku::text"\n' + "output: {database: shops, collection: products, key: [sku]}\n")
    assert (config.output.database, config.output_collection, config.output.key) == ("shops", "products", ["sku"])


# -- retries, timeout, headers, blocked resources -----------------------------------------------------
@pytest.mark.parametrize("value", [-1, 21])
def test_retries_are_between_0_and_20(value: int) -> None:
    assert one_problem(with_lines(f"retries: {value}")).field == "retries"


@pytest.mark.parametrize("value", [0, 601, "fast"])
def test_timeout_is_positive_and_at_most_ten_minutes(value: object) -> None:
    assert one_problem(with_lines(f"timeout: {value}")).field == "timeout"


def test_header_values_are_strings() -> None:
    assert source(with_lines("headers: {Accept-Language: en}")).headers == {"Accept-Language": "en"}
    assert one_problem(with_lines("headers: {X-Count: 5}")).field == "headers.X-Count"


def test_blocked_resource_types_are_known_types() -> None:
    assert source(with_lines("blocked_resource_types: [image, stylesheet]")).blocked_resource_types == [
        "image", "stylesheet"]
    assert one_problem(with_lines("blocked_resource_types: [images]")).field == "blocked_resource_types[0]"


def test_every_problem_of_a_file_is_reported_in_line_order() -> None:
    found = problems(with_lines("priority: urgent", "retries: -1", "timeout: 0"))
    assert [problem.field for problem in found] == ["priority", "retries", "timeout"]
    assert [problem.line for problem in found] == [6, 7, 8]
