"""A run is green only when its data is, against real Redis, MongoDB and the demo site: runs are
planned, produced and worked through the worker's batch pipeline (in this process) and reported as the
``report`` task does.

- the site's markup loses a required field (``/_markup``): the rejected pages count in the attribute shares,
  so the drift check flags the field, and the run's outcome is failed with the reason in one line;
- the same with ``on_breach: warn`` is degraded (green, flagged);
- value rules reject (required) or drop (optional) as specified, counted per attribute and rule.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest
from harvester.config.model import SourceConfig
from harvester.producer.planner import Planner, PlanOptions
from harvester.producer.producer import Producer
from harvester.producer.progress import RunSettlement
from harvester.redis_keys import SourceKeys
from harvester.storage import RunStore

pytestmark = [pytest.mark.integration]
PRODUCTS = 12


def markup(demo_site, query: str = "") -> None:
    request = urllib.request.Request(f"{demo_site.url}/_markup{query}", method="POST", data=b"")
    urllib.request.urlopen(request, timeout=10).close()


@pytest.fixture
def site(demo_site):
    markup(demo_site)
    yield demo_site
    markup(demo_site)


def run(source: SourceConfig, run_id: str, worker_settings, mongo_server, redis_client, crawl,
        params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Plan, produce, work every task, then the report as the report task writes it (attributes, quality)."""
    from harvester.config import RunOptions

    database = mongo_server.client()[worker_settings.mongo_database]
    Planner(database, None, database).plan(source, run_id, PlanOptions.for_source(source))
    produced = Producer.from_settings(worker_settings, database, redis_client).produce(source, run_id)
    RunStore(database).record_produce(source.name, run_id, produced.to_dict())  # as the produce task does
    settlement = RunSettlement(database, database, redis_client)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if crawl.step(source, 16) is None:
            if settlement.settle_and_measure(source.name, source.output_collection, run_id).complete:
                break
            time.sleep(0.2)
    else:
        pytest.fail(f"run {run_id} did not finish")
    return settlement.report(source.name, source.output_collection, run_id, attributes=source.record_attributes,
                             drift_threshold=source.drift_threshold,
                             quality=RunOptions.for_run(source, params).quality)


def details_source(write_source, site, name: str, **overrides: Any) -> SourceConfig:
    document: dict[str, Any] = {"input": {"kind": "details",
                                          "seeds": [f"{site.url}/product/{n}" for n in range(1, PRODUCTS + 1)]},
                                "listing": None, "harvesting_lag": 0, "retries": 0}
    document.update(overrides)
    source = write_source(name, **document)
    assert source.listing is None
    return source


def test_a_required_field_gone_is_drift_and_fails_the_run(write_source, site, worker_settings, mongo_server,
                                                          redis_client, crawl, tmp_path) -> None:
    source = details_source(write_source, site, "quality_drift")
    first = run(source, "run-1", worker_settings, mongo_server, redis_client, crawl)
    assert first["records_stored"] == PRODUCTS and first["extraction"]["shares"]["sku"] == 1.0, first
    assert first["quality"]["outcome"] == "green", first["quality"]

    markup(site, "?sku=code")  # the site renamed the class the required sku was read from
    second = run(source, "run-2", worker_settings, mongo_server, redis_client, crawl)
    # every page was extracted and rejected: the share of sku is over them, not over the (no) stored records
    assert second["records_stored"] == 0 and second["records_extracted"] == PRODUCTS, second
    assert second["extraction"]["records"] == PRODUCTS
    assert second["extraction"]["shares"]["sku"] == 0.0 and second["extraction"]["shares"]["title"] == 1.0
    assert second["selector_drift"] == ["sku"], second["extraction"]
    assert second["rejections"] == {"sku": {"missing": PRODUCTS}}
    quality = second["quality"]
    assert quality["outcome"] == "failed" and quality["breached"], quality
    assert quality["reason"].startswith(f"100 % of pages rejected: sku missing on {PRODUCTS} of {PRODUCTS}"), quality
    assert {breach["threshold"] for breach in quality["breaches"]} >= {"max_rejected_share", "min_stored_share"}
    assert "selector drift: sku" in quality["reason"]
    published = redis_client.hgetall(SourceKeys(source.name).run_quality)
    assert published[b"outcome"] == b"failed" and published[b"run_id"] == b"run-2"

    # each rejected page kept its body as evidence, linked from its dead letter by task id
    from harvester.distributor import DeadLetters
    from harvester.storage import SnapshotStore

    letters = DeadLetters(redis_client).list(source.name, 0, 100)
    assert len(letters) == PRODUCTS and all(letter.reason.startswith("record rejected: sku: missing")
                                            for letter in letters)
    database = mongo_server.client()[worker_settings.mongo_database]
    task_id = letters[0].message["task_id"]
    evidence = SnapshotStore(database).get(source.name, task_id)
    assert evidence is not None and evidence.screenshot is None and evidence.reason == letters[0].reason
    assert 'class="code"' in evidence.html and "<h1" in evidence.html  # the page as fetched: sku renamed

    # opened from the CLI, then requeued from it once the site is fixed: the records land
    import subprocess

    from tests.fixtures.servers import VENV_BIN

    shown = subprocess.run([str(VENV_BIN / "harvester"), "dead-letters", "show", "--source", source.name,
                            "--task", task_id, "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "record rejected: sku: missing" in shown.stdout
    assert (tmp_path / f"{task_id}.html").read_text() == evidence.html
    markup(site)
    requeued = subprocess.run([str(VENV_BIN / "harvester"), "dead-letters", "requeue", "--source", source.name],
                              capture_output=True, text=True, timeout=60)
    assert requeued.returncode == 0 and f"{PRODUCTS} dead letters re-queued" in requeued.stdout, requeued.stderr
    while crawl.step(source, 16) is not None:
        pass
    assert database[source.output_collection].count_documents({"run_id": "run-2"}) == PRODUCTS


def test_on_breach_warn_keeps_the_run_green_but_degraded(write_source, site, worker_settings, mongo_server,
                                                          redis_client, crawl) -> None:
    source = details_source(write_source, site, "quality_warn", quality={"on_breach": "warn"})
    markup(site, "?sku=code")
    report = run(source, "run-1", worker_settings, mongo_server, redis_client, crawl)
    assert report["quality"]["outcome"] == "degraded" and report["quality"]["breached"], report["quality"]
    assert "sku missing on" in report["quality"]["reason"]
    # a trigger's params override the source's thresholds: the same data with on_breach fail is failed
    again = run(source, "run-2", worker_settings, mongo_server, redis_client, crawl, params={"on_breach": "fail"})
    assert again["quality"]["outcome"] == "failed", again["quality"]
    # and loosened thresholds let it pass
    loose = run(source, "run-3", worker_settings, mongo_server, redis_client, crawl,
                params={"on_breach": "fail", "max_rejected_share": 1.0, "min_stored_share": 0.0})
    assert loose["quality"]["outcome"] == "green", loose["quality"]


def test_value_rules_reject_required_and_drop_optional_values(write_source, site, worker_settings, mongo_server,
                                                              redis_client, crawl) -> None:
    attributes = {
        "sku": {"css": ".sku", "required": True, "pattern": r"^SKU-0000[1-9]$"},  # products 10-12 break it
        "title": {"css": "h1.title", "min_length": 1, "max_length": 3},  # every title is longer: dropped
        "price": {"css": ".price", "type": "float", "min": 0},
        "tags": {"css": "li.tag", "type": "list[str]", "enum": ["nothing-like-this"]},  # every tag dropped
    }
    source = details_source(write_source, site, "quality_rules", attributes=attributes,
                            quality={"max_rejected_share": 0.5, "min_stored_share": 0.5})
    report = run(source, "run-1", worker_settings, mongo_server, redis_client, crawl)
    assert report["records_extracted"] == PRODUCTS and report["records_rejected"] == 3, report
    assert report["rejections"] == {"sku": {"pattern": 3}}
    assert report["value_problems"]["title"] == {"max_length": PRODUCTS}
    assert report["value_problems"]["tags"]["enum"] > 0 and "price" not in report["value_problems"]
    assert report["quality"]["outcome"] == "green", report["quality"]  # 25 % rejected, 50 % allowed
    database = mongo_server.client()[worker_settings.mongo_database]
    records = list(database[source.output_collection].find())
    assert len(records) == PRODUCTS - 3
    assert all(record["title"] is None and record["tags"] == [] and record["price"] is not None
               for record in records)
    # counted per attribute and rule for the metrics too
    counters = {key.decode(): int(value) for key, value in
                redis_client.hgetall(SourceKeys(source.name).counters).items()}
    assert counters["outcome:rejected:pattern:sku"] == 3 and counters["outcome:max_length:title"] == PRODUCTS


def test_a_run_with_nothing_to_harvest_keeps_the_last_extraction_health(write_source, site, worker_settings,
                                                                         mongo_server, redis_client, crawl) -> None:
    """Under `make run` the page's "Extraction health" said "no reported run yet" after the demo runs had
    reported: the manual trigger's run found every URL fresh (the harvesting lag), extracted nothing, and its
    empty health replaced the last run's."""
    source = details_source(write_source, site, "quality_fresh", harvesting_lag="1h")
    run(source, "run-1", worker_settings, mongo_server, redis_client, crawl)
    key = SourceKeys(source.name).extraction_health
    assert set(redis_client.hkeys(key)) >= {b"sku", b"title"}
    empty = run(source, "run-2", worker_settings, mongo_server, redis_client, crawl)
    assert empty["urls_planned"] == 0 and empty["extraction"]["records"] == 0, empty
    assert set(redis_client.hkeys(key)) >= {b"sku", b"title"}, "the last run's health was wiped by an empty run"


def test_a_retried_report_task_keeps_the_reported_figures(write_source, site, worker_settings, mongo_server,
                                                          redis_client, crawl) -> None:
    """Under `make run` a run whose pages lost a required field failed its `report` task, as it should; the
    task's retry (a source's `retries` apply to it) reported again after the first report had dropped the run's
    per-run dead-letter records, so the rejected pages became "dead-lettered unanswered", `failures_by_reason`
    went empty and the reason on the Harvester page and in the log changed to a breach that never happened."""
    from harvester.config import RunOptions

    source = details_source(write_source, site, "quality_retry")
    markup(site, "?sku=code")
    first = run(source, "run-1", worker_settings, mongo_server, redis_client, crawl)
    assert first["quality"]["outcome"] == "failed" and first["tasks_dead_unreached"] == 0, first
    database = mongo_server.client()[worker_settings.mongo_database]
    retried = RunSettlement(database, database, redis_client).report(
        source.name, source.output_collection, "run-1", attributes=source.record_attributes,
        drift_threshold=source.drift_threshold, quality=RunOptions.for_run(source, None).quality)
    for figure in ("failures_by_reason", "tasks_reached", "tasks_dead_unreached", "shares", "quality",
                   "finished_at", "duration_seconds"):
        assert retried[figure] == first[figure], (figure, retried[figure], first[figure])
    stored = database["runs"].find_one({"source": source.name, "run_id": "run-1"})["report"]
    assert stored["quality"]["reason"] == first["quality"]["reason"]


def test_a_cleared_run_reports_its_rejections_again_not_dead_tasks(write_source, site, worker_settings,
                                                                   mongo_server, redis_client, crawl) -> None:
    """Under `make run`, clearing a failed DAG run (the README: "clear it or simply run the DAG again") planned the
    same harvest run again and reported it a second time, after the first report had dropped the run's per-run
    dead-letter records: the rejected pages came back as "33 % of tasks dead-lettered unanswered"."""
    source = details_source(write_source, site, "quality_clear")
    markup(site, "?sku=code")
    first = run(source, "run-1", worker_settings, mongo_server, redis_client, crawl)
    assert first["quality"]["outcome"] == "failed" and first["tasks_dead_unreached"] == 0, first
    again = run(source, "run-1", worker_settings, mongo_server, redis_client, crawl)  # plan, produce, report again
    for figure in ("failures_by_reason", "tasks_reached", "tasks_dead_unreached", "shares"):
        assert again[figure] == first[figure], (figure, again[figure], first[figure])
    assert again["quality"]["reason"] == first["quality"]["reason"]
    # the next run's report drops the per-run records of the runs before it: the hash holds the latest run only
    markup(site)
    run(source, "run-2", worker_settings, mongo_server, redis_client, crawl)
    fields = {field.decode() for field in redis_client.hkeys(SourceKeys(source.name).run_dead)}
    assert not any(field.split("|")[0] == "run-1" for field in fields), fields


def test_a_pagination_cut_by_max_depth_is_named_in_the_report(write_source, site, worker_settings, mongo_server,
                                                              redis_client, crawl) -> None:
    """Under `make run` a paginated API source with the default max_depth (2) stored 6 of 10 records and its
    report said nothing: the next page past the depth was only a source counter."""
    records = {"item": "json:items", "attributes": {"sku": {"json": "sku", "required": True}}, "key": ["sku"]}
    source = write_source("quality_depth", content="json", harvesting_lag=0, retries=0, attributes={}, output={},
                          input={"kind": "listing", "seeds": [f"{site.url}/api/products?per_page=10"]},
                          listing={"next_page_selectors": ["json:links.next"], "max_depth": 1, "records": records})
    report = run(source, "run-1", worker_settings, mongo_server, redis_client, crawl)
    assert report["records_stored"] == 20, report
    assert report["links_cut"] == {"beyond_max_depth": 1}, report
    assert report["quality"]["outcome"] == "green"
