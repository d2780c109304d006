"""The planner against a real MongoDB-wire server: streaming input, bad input, lag, batch limit, resume."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest
from harvester.producer.planner import Planner, PlanOptions, valid_url
from harvester.storage.packages import PackageStatus, PackageStore
from harvester.storage.runs import RunStore

pytestmark = pytest.mark.integration


@pytest.fixture
def database(mongo_client, mongo_database):
    return mongo_client[mongo_database]


def _planner(database) -> Planner:
    return Planner(database, input_database=database, output_database=database)


def _urls_of_run(database, run_id: str) -> list[str]:
    return [url for package in database.packages.find({"run_id": run_id}).sort("package_id", 1)
            for url in package["urls"]]


@pytest.mark.unit
def test_valid_url() -> None:
    assert valid_url("  https://shop.example/p/1 ") == "https://shop.example/p/1"
    for bad in (None, 42, "", "ftp://x/y", "/relative", "http://", "javascript:alert(1)", "http://a b/"):
        assert valid_url(bad) is None


@pytest.mark.unit
def test_manual_params_override_the_batch(make_source) -> None:
    options = PlanOptions.for_source(make_source(), {"batch_size": 7, "max_packages": 2, "urls": ["http://a/1", " http://a/2"]})
    assert (options.batch_size, options.max_packages, options.urls) == (7, 2, ["http://a/1", "http://a/2"])
    assert PlanOptions.for_source(make_source(), {}).batch_size == 3


def test_packages_from_seeds_and_mongo_with_bad_input_counted(database, make_source, caplog) -> None:
    database.shop_input.insert_many(
        [{"url": f"http://shop.example/p/{i}"} for i in range(7)]
        + [{"url": None}, {"name": "no url"}, {"url": "ftp://shop.example/x"}, {"url": "http://shop.example/p/1"}]
    )
    source = make_source(input={"seeds": ["http://shop.example/seed"], "kind": "details",
                                "mongo": {"collection": "shop_input", "filter": {}}})
    with caplog.at_level(logging.WARNING):
        result = _planner(database).plan(source, "run1", PlanOptions.for_source(source))
    assert result.urls_read == 12
    assert result.skipped_invalid == 3
    assert result.skipped_duplicate == 1
    assert len(result.invalid_examples) == 3 and "None" in result.invalid_examples[0]
    assert "skipped 3 input documents without a valid URL" in caplog.text
    assert result.urls_planned == 8 and result.packages_total == 3 and result.packages_created == 3
    assert [len(p["urls"]) for p in database.packages.find().sort("package_id", 1)] == [3, 3, 2]
    assert all(p["status"] == PackageStatus.WAITING for p in database.packages.find())
    assert RunStore(database).get("shop", "run1")["plan"]["urls_planned"] == 8


def test_harvesting_lag_skips_fresh_urls(database, make_source) -> None:
    now = datetime.now(UTC)
    database.shop_input.insert_many([{"url": f"http://shop.example/p/{i}"} for i in range(6)])
    database.shop.insert_many([
        {"url": "http://shop.example/p/0", "harvested_at": now - timedelta(minutes=10)},  # fresh
        {"url": "http://shop.example/p/1", "harvested_at": now - timedelta(hours=3)},  # old: due again
        {"url": "http://shop.example/p/2", "harvested_at": now - timedelta(minutes=59)},  # fresh
    ])
    source = make_source()
    result = _planner(database).plan(source, "run1", PlanOptions.for_source(source), now=now)
    assert result.skipped_fresh == 2
    assert sorted(_urls_of_run(database, "run1")) == [f"http://shop.example/p/{i}" for i in (1, 3, 4, 5)]
    # URLs given by hand are harvested now, whatever their age.
    forced = _planner(database).plan(source, "manual", PlanOptions.for_source(source, {"urls": ["http://shop.example/p/0"]}))
    assert forced.skipped_fresh == 0 and _urls_of_run(database, "manual") == ["http://shop.example/p/0"]


def test_an_output_older_than_the_lag_makes_every_url_due(database, make_source) -> None:
    now = datetime.now(UTC)
    database.shop_input.insert_many([{"url": f"http://shop.example/p/{i}"} for i in range(4)])
    database.shop.insert_many([
        {"url": f"http://shop.example/p/{i}", "harvested_at": now - timedelta(hours=2 + i)} for i in range(4)
    ])
    source = make_source()
    result = _planner(database).plan(source, "run1", PlanOptions.for_source(source), now=now)
    assert result.skipped_fresh == 0 and result.urls_planned == 4
    # One record becomes fresh: the per-chunk lookups are back and skip exactly it.
    database.shop.update_one({"url": "http://shop.example/p/3"}, {"$set": {"harvested_at": now}})
    database.runs.delete_many({})  # a fresh start, not a continuation of run1
    database.packages.delete_many({})
    again = _planner(database).plan(source, "run2", PlanOptions.for_source(source), now=now)
    assert again.skipped_fresh == 1
    assert "http://shop.example/p/3" not in _urls_of_run(database, "run2")


def test_batch_limit_defers_the_rest_to_the_next_run(database, make_source) -> None:
    database.shop_input.insert_many([{"url": f"http://shop.example/p/{i}"} for i in range(10)])
    source = make_source(batch={"size": 3, "max_packages": 2})
    first = _planner(database).plan(source, "run1", PlanOptions.for_source(source))
    assert first.batch_limit_reached and first.urls_planned == 6 and first.packages_total == 2
    # The first run's pages get harvested and it reports; the next run plans only what is left.
    RunStore(database).record_report("shop", "run1", {})
    now = datetime.now(UTC)
    database.shop.insert_many([{"url": url, "harvested_at": now} for url in _urls_of_run(database, "run1")])
    second = _planner(database).plan(source, "run2", PlanOptions.for_source(source))
    assert not second.batch_limit_reached and second.urls_planned == 4 and second.skipped_fresh == 6
    assert set(_urls_of_run(database, "run1")).isdisjoint(_urls_of_run(database, "run2"))


def test_replanning_a_run_is_idempotent_and_a_half_done_plan_continues(database, make_source) -> None:
    database.shop_input.insert_many([{"url": f"http://shop.example/p/{i}"} for i in range(8)])
    source = make_source()
    planner = _planner(database)
    planner.plan(source, "run1", PlanOptions.for_source(source))
    again = planner.plan(source, "run1", PlanOptions.for_source(source))
    assert again.resumed and database.packages.count_documents({}) == 3
    # Simulate a planner killed after its first package: the plan record and later packages are missing.
    database.runs.update_one({"run_id": "run1"}, {"$unset": {"plan": ""}})
    database.packages.delete_many({"package_id": {"$gt": 0}})
    continued = planner.plan(source, "run1", PlanOptions.for_source(source))
    assert continued.resumed and continued.urls_planned == 8 and continued.packages_total == 3
    assert sorted(_urls_of_run(database, "run1")) == sorted(f"http://shop.example/p/{i}" for i in range(8))


def test_two_planners_of_one_run_make_one_set_of_packages(database, make_source) -> None:
    database.shop_input.insert_many([{"url": f"http://shop.example/p/{i}"} for i in range(30)])
    source = make_source()
    threads = [threading.Thread(target=_planner(database).plan, args=(source, "run1", PlanOptions.for_source(source)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    urls = _urls_of_run(database, "run1")
    assert len(urls) == len(set(urls)) == 30
    assert PackageStore(database).status_counts("shop", "run1")[PackageStatus.WAITING] == 10


def test_a_new_run_continues_an_unfinished_one(database, make_source) -> None:
    database.shop_input.insert_many([{"url": f"http://shop.example/p/{i}"} for i in range(5)])
    source = make_source()
    first = _planner(database).plan(source, "manual__1", PlanOptions.for_source(source))
    # manual__1 died before reporting; the next Airflow run (new id) continues it instead of re-planning.
    second = _planner(database).plan(source, "scheduled__2", PlanOptions.for_source(source))
    assert second.run_id == "manual__1" and second.resumed and second.packages_total == first.packages_total
    assert database.packages.count_documents({}) == 2
    assert RunStore(database).get("shop", "manual__1")["airflow_run_ids"] == ["manual__1", "scheduled__2"]
    # Once it reported, the following run is a fresh one.
    RunStore(database).record_report("shop", "manual__1", {})
    third = _planner(database).plan(source, "scheduled__3", PlanOptions.for_source(source))
    assert third.run_id == "scheduled__3" and not third.resumed
    # Clearing an old run's tasks comes back to that run, even while a newer one is unfinished.
    assert _planner(database).plan(source, "manual__1", PlanOptions.for_source(source)).run_id == "manual__1"
    assert _planner(database).plan(source, "scheduled__2", PlanOptions.for_source(source)).run_id == "manual__1"


def test_input_urls_not_in_canonical_form_are_found_fresh(database, make_source) -> None:
    """Records are stored under the canonical URL, so the lag lookup must use it too."""
    now = datetime.now(UTC)
    database.shop_input.insert_many([
        {"url": "HTTP://Shop.Example:80/p/0?utm_source=mail#top"},  # fresh once canonical
        {"url": "http://shop.example/p/./1?b=2&a=1"},  # due, planned in its canonical form
        {"url": "http://user:secret@shop.example/p/0"},  # the same page again, with credentials
    ])
    database.shop.insert_one({"url": "http://shop.example/p/0", "harvested_at": now - timedelta(minutes=5)})
    source = make_source()
    result = _planner(database).plan(source, "run1", PlanOptions.for_source(source), now=now)
    assert result.skipped_fresh == 1 and result.skipped_duplicate == 1
    assert _urls_of_run(database, "run1") == ["http://shop.example/p/1?a=1&b=2"]


def test_planning_a_large_input_logs_its_progress(database, make_source, caplog, monkeypatch) -> None:
    import harvester.producer.planner as planner_module

    monkeypatch.setattr(planner_module, "PROGRESS_LOG_SECONDS", 0.0)  # every chunk read logs a line
    database.shop_input.insert_many([{"url": f"http://shop.example/p/{i}"} for i in range(2500)])
    source = make_source(batch={"size": 100, "max_packages": 100})
    with caplog.at_level(logging.INFO, logger="harvester.producer.planner"):
        _planner(database).plan(source, "big", PlanOptions.for_source(source))
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("planning shop big")]
    assert any("URLs read" in line and "packages" in line for line in lines), lines
    assert lines[-1].startswith("planning shop big: done, 2500 URLs read")


def test_urls_a_cached_robots_txt_disallows_are_skipped_and_counted(database, make_source, redis_client) -> None:
    """robots.txt honoured at planning too (only cached rules: the planner never fetches)."""
    from harvester.scraping.fetching.robots import RobotsCache, RobotsRules

    database.shop_input.insert_many([{"url": f"http://shop.example/{kind}/{i}"} for kind in ("p", "private")
                                     for i in range(3)])
    robots = RobotsCache(redis_client, cache_seconds=24 * 3600.0)
    robots._remember(RobotsRules("http://shop.example", "User-agent: *\nDisallow: /private/\n", 200))
    source = make_source()
    result = Planner(database, database, database, robots=robots).plan(source, "run1", PlanOptions.for_source(source))
    assert result.skipped_robots == 3 and result.urls_planned == 3
    ignoring = make_source(name="shop_ignoring", robots="ignore")
    again = Planner(database, database, database, robots=robots).plan(ignoring, "run1",
                                                                    PlanOptions.for_source(ignoring))
    assert again.skipped_robots == 0 and again.urls_planned == 6
