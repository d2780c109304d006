"""What a manual trigger may override for one run."""

from __future__ import annotations

import pytest
from harvester.config.run_options import RunOptions
from pydantic import ValidationError

from tests.config.helpers import source, with_lines

pytestmark = pytest.mark.unit


def test_without_params_a_run_uses_the_source_batch_settings() -> None:
    options = RunOptions.for_run(source(with_lines("batch: {size: 20, max_packages: 3}")))
    assert (options.batch_size, options.max_packages, options.urls) == (20, 3, [])


def test_params_override_batch_size_max_packages_and_urls() -> None:
    options = RunOptions.for_run(source(), {"batch_size": 5, "max_packages": 2, "urls": ["https://a.example/1", " "]})
    assert (options.batch_size, options.max_packages, options.urls) == (5, 2, ["https://a.example/1"])


def test_null_params_keep_the_source_settings() -> None:
    options = RunOptions.for_run(source(), {"batch_size": None, "max_packages": None, "urls": None})
    assert (options.batch_size, options.max_packages) == (100, 100)


@pytest.mark.parametrize("params", [{"batch_size": 0}, {"batch_size": 10_001}, {"urls": ["ftp://a.example/x"]}])
def test_bad_params_are_rejected(params: dict) -> None:
    with pytest.raises(ValidationError):
        RunOptions.for_run(source(), params)


def test_detail_urls_plan_detail_pages_on_a_listing_source() -> None:
    from harvester.producer.planner import PlanOptions

    listing = source("name: shop\ninput: {kind: listing, seeds: ['https://a.example/shop']}\n"
                     "listing: {link_selectors: [a.item]}\nattributes: {title: 'h1::text'}\n")
    options = PlanOptions.for_source(listing, {"detail_urls": ["https://a.example/item/1"]})
    assert (options.kind, options.urls) == ("details", ["https://a.example/item/1"])
    assert PlanOptions.for_source(listing, {"urls": ["https://a.example/shop?page=2"]}).kind is None


@pytest.mark.parametrize(("params", "message"), [
    ({"detail_urls": ["ftp://a.example/x"]}, "detail_urls"),
    ({"urls": ["https://a.example/1"], "detail_urls": ["https://a.example/2"]}, "not both"),
])
def test_bad_detail_urls_are_rejected_naming_the_option(params: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RunOptions.for_run(source(), params)
