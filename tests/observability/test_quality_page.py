"""The Harvester page tells a degraded run's story, in real Chromium against a real `airflow
api-server`: a source's pages lose their required sku (the demo site's ``/_markup``), its run (harvested
through the worker's pipeline against real Redis, MongoDB and the demo site, reported as the ``report``
task does) is degraded under ``on_breach: warn``; the page shows the outcome and the reason in words, the
rejected share, the run's rejections, and opens a rejection's evidence: the body of the page as fetched.

Screenshots land in var/test-artifacts/quality/ (docs/harvester-page.png is the last one).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from harvester.settings import REPOSITORY_ROOT

from tests.observability.airflow_server import USERS, AirflowServer, start_api_server
from tests.workers.conftest import crawl, runner, worker_settings, write_source
from tests.workers.test_quality import details_source, markup, run

__all__ = ["crawl", "runner", "worker_settings", "write_source"]
pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]
ARTIFACTS = REPOSITORY_ROOT / "var" / "test-artifacts" / "quality"
SOURCE = "quality_page"


@pytest.fixture
def site(demo_site) -> Iterator:
    markup(demo_site)
    yield demo_site
    markup(demo_site)


@pytest.fixture
def airflow(worker_settings, tmp_path, migrated_airflow_database) -> Iterator[AirflowServer]:
    # after the settings: it reads their HARVESTER_* variables
    server = start_api_server(tmp_path / "airflow", migrated_airflow_database)
    yield server
    server.server.stop()


def test_the_page_shows_a_degraded_runs_reason_and_opens_a_rejections_evidence(
        write_source, site, worker_settings, mongo_server, redis_client, crawl, airflow, tmp_path) -> None:
    from playwright.sync_api import expect, sync_playwright

    source = details_source(write_source, site, SOURCE, quality={"on_breach": "warn"})
    first = run(source, "run-1", worker_settings, mongo_server, redis_client, crawl)
    assert first["quality"]["outcome"] == "green", first["quality"]
    markup(site, "?sku=code")  # the site renamed the class the required sku is read from
    second = run(source, "run-2", worker_settings, mongo_server, redis_client, crawl)
    assert second["quality"]["outcome"] == "degraded", second["quality"]

    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(worker_settings.chromium_executable),
                                                 args=["--no-sandbox", "--disable-dev-shm-usage"])
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.goto(f"{airflow.base_url}/")
            page.fill("input[name=username]", "operator")  # may read and requeue (edit) the source's DAG
            page.fill("input[name=password]", USERS["operator"][1])
            page.keyboard.press("Enter")
            page.get_by_role("link", name="Harvester").first.click()
            frame = page.frame_locator("iframe")

            # the source's last run: degraded, the reason in words, the rejected share
            source_row = frame.locator(f"#sources-table tr[data-source={SOURCE}]")
            expect(source_row).to_have_attribute("data-outcome", "degraded", timeout=60_000)
            expect(source_row.locator("td.last-run")).to_contain_text("success, degraded")
            expect(source_row.locator("td.last-run")).to_contain_text("100 % of pages rejected: sku missing on")
            expect(source_row.locator("td.rejected")).to_have_text("100.0%")
            # the drift figures are over the rejected pages too: sku went from 100 % to 0 %
            sku = frame.locator(f"#health-table tr[data-source={SOURCE}][data-attribute=sku]")
            expect(sku).to_have_attribute("data-drift", "yes")

            # the runs as rows: the degraded one with its reason, the green one before it
            degraded = frame.locator(f"#runs-table tr[data-run=run-2][data-source={SOURCE}]")
            expect(degraded).to_have_attribute("data-outcome", "degraded")
            expect(degraded.locator("td.reason")).to_contain_text(
                f"100 % of pages rejected: sku missing on {len(source.input.seeds)} of {len(source.input.seeds)}")
            expect(degraded.locator("td.rejected")).to_have_text("100.0%")
            expect(frame.locator(f"#runs-table tr[data-run=run-1][data-source={SOURCE}]")).to_contain_text("success")
            page.screenshot(path=str(shots / "1-degraded-run.png"), full_page=True)

            # its records and rejections: every page rejected, each with its evidence
            degraded.click()
            records = frame.locator("#run-records")
            expect(records).to_have_attribute("data-run", "run-2", timeout=30_000)
            expect(frame.locator("#run-records-reason")).to_contain_text("sku missing on")
            rejections = frame.locator("#run-rejections tr.rejection")
            expect(rejections).to_have_count(len(source.input.seeds))
            expect(rejections.first).to_contain_text("record rejected: sku: missing")
            frame.locator("#run-records").scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "2-run-rejections.png"), full_page=True)

            # a rejection's evidence: the body of the page as it was fetched, served sandboxed
            evidence_link = rejections.first.locator("a.snapshot-snapshot")
            expect(evidence_link).to_be_visible()
            expect(rejections.first.locator("a.snapshot-screenshot")).to_have_count(0)  # an HTTP page: no screenshot
            evidence_link.click()
            viewer = frame.locator("#evidence")
            expect(viewer).to_be_visible()
            expect(viewer).to_have_attribute("data-kind", "snapshot")
            body = frame.frame_locator("#evidence-frame")
            expect(body.locator("h1")).to_be_visible(timeout=30_000)
            expect(body.locator("span.code")).to_have_count(1)  # the page as fetched: the sku's class renamed
            expect(body.locator("span.sku")).to_have_count(0)
            headers = context.request.get(evidence_link.get_attribute("href")).headers
            assert "sandbox" in headers["content-security-policy"]  # a stranger's HTML runs no script here
            viewer.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "3-evidence.png"), full_page=True)

            # the site is fixed: requeue from the page, and the pages land
            markup(site)
            frame.locator("#dead-source").select_option(SOURCE)
            frame.locator("#requeue").click()
            expect(frame.locator("#requeue-result")).to_contain_text(f"{len(source.input.seeds)} requeued, 0 left",
                                                                     timeout=30_000)
            expect(frame.locator("#dead-letters tr.dead-letter")).to_have_count(0, timeout=30_000)
            page.screenshot(path=str(shots / "4-requeued.png"), full_page=True)
            browser.close()
        # the requeued tasks are harvested (by the worker's pipeline, out of Playwright's event loop): they land
        while crawl.step(source, 16) is not None:
            pass
        output = mongo_server.client()[worker_settings.mongo_database][source.output_collection]
        assert output.count_documents({"run_id": "run-2"}) == len(source.input.seeds)
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for picture in shots.glob("*.png"):
            shutil.copy(picture, ARTIFACTS / picture.name)
        (ARTIFACTS / "api-server.log.tail").write_text(airflow.log_tail())
