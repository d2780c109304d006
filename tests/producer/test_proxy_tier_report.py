"""A source's proxy cost in its run report: each page's tier and response bytes, recorded with the batch's
requests (harvester.metrics.recording), read back by the report as ``proxy_tiers`` (harvester.producer.progress)."""

from __future__ import annotations

import pytest
from harvester.distributor import TaskMessage
from harvester.metrics.recording import record_fetches
from harvester.producer.progress import proxy_tier_figures
from harvester.redis_keys import SourceKeys
from harvester.scraping import FetchResult
from harvester.storage import RunFigures


@pytest.mark.unit
def test_the_report_shows_each_tiers_requests_and_bytes_and_nothing_without_tiers() -> None:
    figures = {"proxy_tier_requests:direct": 5, "proxy_tier_bytes:direct": 600,
               "proxy_tier_requests:residential": 2, "proxy_tier_bytes:residential": 9000, "archived": 3}
    assert proxy_tier_figures(figures) == {"proxy_tiers": {"direct": {"requests": 5, "bytes": 600},
                                                           "residential": {"requests": 2, "bytes": 9000}}}
    assert proxy_tier_figures({"archived": 3}) == {}


@pytest.mark.integration
def test_a_batchs_pages_count_in_their_runs_figures_by_tier(redis_client) -> None:
    messages = [TaskMessage(source="tiered", url=f"http://shop.example/{number}", run_id=run)
                for number, run in ((1, "run-a"), (2, "run-a"), (3, "run-b"), (4, None))]
    fetches = [FetchResult(messages[0].url, "blocked", status=403, tier="direct", transferred=300),
               FetchResult(messages[1].url, "ok", status=200, tier="residential", transferred=4000),
               FetchResult(messages[2].url, "ok", status=200, tier="residential", transferred=5000),
               FetchResult(messages[3].url, "ok", status=200)]  # a page of a source without tiers counts none
    record_fetches(redis_client, "tiered", messages, fetches)
    run_a, _ = RunFigures(redis_client).read("tiered", "run-a")
    assert proxy_tier_figures(run_a) == {"proxy_tiers": {"direct": {"requests": 1, "bytes": 300},
                                                         "residential": {"requests": 1, "bytes": 4000}}}
    run_b, _ = RunFigures(redis_client).read("tiered", "run-b")
    assert proxy_tier_figures(run_b)["proxy_tiers"] == {"residential": {"requests": 1, "bytes": 5000}}
    assert RunFigures(redis_client).read("tiered", None)[0] == {}
    totals = {name.decode(): int(value) for name, value in
              redis_client.hgetall(SourceKeys("tiered").proxy_tiers_traffic).items()}
    assert totals == {"proxy_tier_requests:direct": 1, "proxy_tier_bytes:direct": 300,
                      "proxy_tier_requests:residential": 2, "proxy_tier_bytes:residential": 9000}
