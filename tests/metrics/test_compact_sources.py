"""What a source outside ``metrics_detailed_sources`` exports: the counters it rarely moves only once they moved,
every series a shipped alert reads always (real Redis, the collector's text exposition)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from harvester.config.model import SourceConfig
from harvester.distributor import Intake
from harvester.metrics.collector import ONCE_MOVED_COUNTERS, metrics_registry
from harvester.metrics.recording import record_fetches
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings

from tests.metrics.helpers import Samples, scrape

pytestmark = pytest.mark.integration

ALERT_RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
ONE_DETAILED = HarvesterSettings(metrics_detailed_sources=1)


def register(client: redis.Redis, name: str, requests: int, browser: bool = False) -> None:
    """A registered source that made ``requests`` fetches (the busiest one is the detailed one)."""
    Intake(client, HarvesterSettings()).register_source(SourceConfig.model_validate(
        {"name": name, "attributes": {"t": "h1"}, "input": {"kind": "details", "seeds": ["http://a.example/1"]},
         **({"render": "browser", "country": "SG"} if browser else {})}))
    message = SimpleNamespace(enqueued_at=0.0, url="http://a.example/1", run_id="r")
    fetch = SimpleNamespace(outcome="ok", status=200, elapsed=0.3, started_at=1.0, tier="", transferred=0)
    record_fetches(client, name, [message] * requests, [fetch] * requests, now=2.0)


def series_of(samples: Samples, source: str) -> dict[str, float]:
    return {name: amount for (name, labels), amount in samples.items() if ("source", source) in labels}


@pytest.fixture
def fleet(redis_client: redis.Redis) -> redis.Redis:
    register(redis_client, "busy", 3)
    register(redis_client, "quiet", 1)
    register(redis_client, "quiet_browser", 1, browser=True)
    return redis_client


def test_a_compact_source_leaves_out_the_counters_it_never_moved(fleet: redis.Redis) -> None:
    quiet = series_of(scrape(metrics_registry(fleet, ONE_DETAILED)), "quiet")
    assert not {f"{name}_total" for name in ONCE_MOVED_COUNTERS} & quiet.keys()
    # what every working source moves stays, at 0 too
    for name in ("harvester_records_stored_total", "harvester_records_new_total", "harvester_tasks_admitted_total",
                 "harvester_tasks_done_total", "harvester_tasks_pushed_total", "harvester_requests_total"):
        assert name in quiet, name
    assert len(quiet) == 13, sorted(quiet)  # 18 before the rule
    browser = series_of(scrape(metrics_registry(fleet, ONE_DETAILED)), "quiet_browser")
    assert "harvester_browser_restarts_total" not in browser
    assert {"harvester_browser_blocked_bytes_total", "harvester_browser_transferred_bytes_total"} <= browser.keys()


def test_a_detailed_source_keeps_every_counter_at_0(fleet: redis.Redis) -> None:
    busy = series_of(scrape(metrics_registry(fleet, ONE_DETAILED)), "busy")
    assert {f"{name}_total" for name in ONCE_MOVED_COUNTERS} - {"harvester_browser_restarts_total"} <= busy.keys()
    everything = series_of(scrape(metrics_registry(fleet, HarvesterSettings())), "quiet")
    assert "harvester_retries_total" in everything  # unset: every source is detailed


def test_a_counter_appears_at_its_first_move_and_stays(fleet: redis.Redis) -> None:
    counters = SourceKeys("quiet").counters
    fleet.hincrby(counters, "retried", 2)
    fleet.hincrby(counters, "outcome:records_changed", 1)
    registry = metrics_registry(fleet, ONE_DETAILED)
    quiet = series_of(scrape(registry), "quiet")
    assert quiet["harvester_retries_total"] == 2 and quiet["harvester_records_changed_total"] == 1
    assert "harvester_reaps_total" not in quiet
    fleet.hincrby(counters, "retried", 1)  # Redis keeps the running total: the series never goes away
    assert series_of(scrape(registry), "quiet")["harvester_retries_total"] == 3


def test_every_per_source_series_an_alert_reads_is_exported_for_a_compact_source(fleet: redis.Redis) -> None:
    metrics = set(re.findall(r"\bharvester_[a-z_]+", ALERT_RULES.read_text()))
    assert "harvester_dead_letters_total" in metrics
    assert not {name.removesuffix("_total") for name in metrics} & ONCE_MOVED_COUNTERS
    # HarvestDeadLettersGrowing takes increase() of it: the series is there at 0, before the first dead letter
    assert series_of(scrape(metrics_registry(fleet, ONE_DETAILED)), "quiet")["harvester_dead_letters_total"] == 0
