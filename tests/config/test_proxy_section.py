"""The ``proxy:`` section of a source (tiers of ways out and their quiet period): what passes, what fails, and
where (``file:line: field: reason``)."""

from __future__ import annotations

import pytest
from harvester.config import DIRECT_TIER

from tests.config.helpers import one_problem, source, with_lines

pytestmark = pytest.mark.unit


def test_a_source_has_no_tiers_by_default() -> None:
    proxy = source().proxy
    assert (proxy.tiers, proxy.quiet) == ([], 600.0)


def test_tiers_are_read_cheapest_first() -> None:
    proxy = source(with_lines("country: SG", "proxy:", "  tiers: [direct, datacenter, residential]")).proxy
    assert proxy.tiers == [DIRECT_TIER, "datacenter", "residential"]


def test_tiers_need_not_start_direct() -> None:
    assert source(with_lines("country: SG", "proxy: {tiers: [datacenter, residential]}")).proxy.tiers == [
        "datacenter", "residential"]


@pytest.mark.parametrize(("given", "seconds"), [("90s", 90.0), ("10m", 600.0), ("1h", 3600.0), ("45", 45.0)])
def test_quiet_reads_a_duration(given: str, seconds: float) -> None:
    proxy = source(with_lines("country: SG", "proxy:", "  tiers: [direct, residential]", f"  quiet: {given}")).proxy
    assert proxy.quiet == seconds


@pytest.mark.parametrize("proxy", ["proxy: {tiers: [direct, residential], quiet: 2m}", "proxy: {}"])
def test_the_registered_copy_validates_back_to_the_same_proxy_section(proxy: str) -> None:
    config = source(with_lines("country: SG", proxy))
    again = type(config).model_validate_json(config.model_dump_json())  # what workers read (SourceRegistry)
    assert again.proxy == config.proxy


@pytest.mark.parametrize(("lines", "line", "field", "reason"), [
    (["proxy:", "  tiers: [datacenter, direct]"], 8, "proxy.tiers", "direct costs nothing, so it comes first"),
    (["proxy:", "  tiers: [direct]"], 8, "proxy.tiers", "give two tiers or more"),
    (["proxy:", "  tiers: [direct, Data-Center]"], 8, "proxy.tiers", "'Data-Center' is not a tier name"),
    (["proxy:", "  tiers: [direct, dc, dc]"], 8, "proxy.tiers", "dc listed twice"),
    (["proxy:", "  tiers: [direct, a, b, c, d, e]"], 8, "proxy.tiers", "at most 5"),
    (["proxy:", "  tiers: [direct, dc]", "  quiet: 0s"], 9, "proxy.quiet", "between 1s and 7d"),
    (["proxy:", "  tiers: [direct, dc]", "  quiet: 8d"], 9, "proxy.quiet", "between 1s and 7d"),
    (["proxy:", "  tiers: [direct, dc]", "  quiet: soon"], 9, "proxy.quiet", "expected a duration"),
    (["proxy:", "  quiet: 5m"], 8, "proxy.quiet", "a quiet period is for tiers"),
    (["proxy:", "  tier: [direct, dc]"], 8, "proxy.tier", "unknown key"),
])
def test_a_bad_proxy_section_names_the_field_and_the_line(lines: list[str], line: int, field: str,
                                                         reason: str) -> None:
    problem = one_problem(with_lines("country: SG", *lines))
    assert (problem.field, problem.line) == (field, line) and reason in problem.reason, problem


def test_tiers_need_a_country() -> None:
    problem = one_problem(with_lines("proxy:", "  tiers: [direct, residential]"))
    assert (problem.field, problem.line) == ("proxy.tiers", 7) and "give the source a country" in problem.reason
    assert str(problem).startswith("shop.yaml:7: proxy.tiers: ")


def test_tiers_are_for_http_sources() -> None:
    problem = one_problem(with_lines("country: SG", "render: browser", "proxy:", "  tiers: [direct, residential]"))
    assert problem.field == "proxy.tiers" and "render: http sources" in problem.reason
