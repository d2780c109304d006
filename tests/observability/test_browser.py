"""The Harvester page in a real browser (Playwright + Chromium) against `airflow standalone`, a real
distributor, a Celery worker, a page-slot host with an SG forward proxy and the demo site: log in,
open Harvester from the navigation, watch an HTTP harvest and a browser harvest (the page_slots DAG
creates SG slots, the slot host renders through the SG proxy), see selector drift after the site
changes its markup between two runs, requeue a dead letter and watch it leave the list, start a job
from the page and see its run.

Screenshots land in var/test-artifacts/observability/ (and in the test's tmp directory).
"""

from __future__ import annotations

import shutil
import time
import urllib.request
from collections.abc import Callable

import httpx
import pytest
import yaml
from harvester.distributor import DeadLetters
from harvester.pageslots.registry import SlotHosts
from harvester.redis_keys import PageSlotKeys
from harvester.services import readiness
from harvester.services.airflow_api import run_failure
from harvester.services.ports import LOOPBACK, free_port
from harvester.settings import REPOSITORY_ROOT, HarvesterSettings

from tests.fixtures.demo_site import demo_source_document
from tests.fixtures.servers import VENV_BIN, ServerProcess
from tests.observability.airflow_server import USERS, AirflowServer, airflow_environment, trigger_run

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]
ARTIFACTS = REPOSITORY_ROOT / "var" / "test-artifacts" / "observability"
SOURCE = "watched"
DAG_ID = f"harvest_{SOURCE}"
BROWSER_SOURCE = "watched_sg"  # JavaScript pages rendered in SG page slots through the SG proxy
BROWSER_DAG_ID = f"harvest_{BROWSER_SOURCE}"
SLOTS_DAG_ID = "page_slots"


@pytest.fixture
def browser_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    # 6 pages per 3-second window: 24 pages take ~12 s, long enough to watch the harvest run.
    return configure_settings(producer_poll_seconds=1, producer_wait_timeout_seconds=300, lease_seconds=20,
                              heartbeat_seconds=2, rate_window_seconds=3, retry_base_seconds=0.2)


def wait_for(condition: Callable[[], object], timeout: float, what: str, tail: Callable[[], str]) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(1)
    raise AssertionError(f"{what} within {timeout}s\n{tail()}")


def run_state(client: httpx.Client, run_id: str, dag_id: str = DAG_ID) -> str:
    return client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json().get("state", "")


def trigger(client: httpx.Client, dag_id: str) -> str:
    return trigger_run(client, f"/api/v2/dags/{dag_id}/dagRuns")


def browser_source_document(base_url: str) -> dict:
    """24 JavaScript product pages (their facts only exist once the script ran), 2 pages per 3-second
    window: long enough that the slots are still working while the page is watched."""
    document = demo_source_document(base_url, BROWSER_SOURCE, rate_limit={"max_active": 2, "per_minute": 2},
                                    harvesting_lag=0, schedule=None, retries=2, timeout=30,
                                    batch={"size": 6, "max_packages": 50})
    document.pop("listing")
    document.update({
        "render": "browser", "country": "SG",
        "input": {"kind": "details", "seeds": [f"{base_url}/js/product/{n}" for n in range(101, 125)]},
        "attributes": {"title": {"css": "#app.ready h1.title::text", "required": True},
                       "sku": {"css": "#app.ready span.sku::text", "required": True},
                       "price": {"css": "#app.ready span.price::text", "type": "float"}},
        "output": {"key": ["sku"]}, "blocked_resource_types": ["image", "font", "media", "stylesheet"],
    })
    return document


SLOT_CHART_FIGURES = """canvas => {
  const chart = window.Chart && window.Chart.getChart(canvas);
  if (!chart) return null;
  return { countries: chart.data.labels,
           states: Object.fromEntries(chart.data.datasets.map((set) => [set.label, set.data])) };
}"""


def chart_slots(chart, country: str) -> dict[str, int]:
    """What the slots chart draws for ``country``: state -> slots (an empty dict before it draws it)."""
    figures = chart.evaluate(SLOT_CHART_FIGURES)
    if not figures or country not in figures["countries"]:
        return {}
    column = figures["countries"].index(country)
    return {state: values[column] for state, values in figures["states"].items() if values[column]}


def test_operators_watch_a_harvest_in_the_browser(browser_settings, demo_site, mongo_server, redis_client,
                                                   celery_worker_factory, start_distributor, forward_proxy_factory,
                                                   monkeypatch, tmp_path) -> None:
    from playwright.sync_api import expect, sync_playwright

    pages = [f"{demo_site.url}/product/{i}" for i in range(1, 24)]
    pages.append(f"{demo_site.url}/flaky/browser-test?fail=1")  # fails once: a dead letter (retries 0)
    document = demo_source_document(demo_site.url, SOURCE, rate_limit={"max_active": 2, "per_minute": 6},
                                    harvesting_lag=0, schedule=None, retries=0, batch={"size": 6, "max_packages": 50})
    document["input"] = {"kind": "details", "seeds": pages}
    document.pop("listing")
    (browser_settings.sources_dir / f"{SOURCE}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    (browser_settings.sources_dir / f"{BROWSER_SOURCE}.yaml").write_text(
        yaml.safe_dump(browser_source_document(demo_site.url), sort_keys=False))
    sg_proxy = forward_proxy_factory("SG")
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG", sg_proxy.url)  # the slot host, the DAGs and Airflow see it
    celery_worker_factory(queues="default,priority", concurrency=2)
    celery_worker_factory(queues="pageslots", concurrency=2, name="slots")  # a slot host: 2 page slots
    start_distributor()

    port = free_port()
    env = airflow_environment(tmp_path / "airflow", port, **{
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5", "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1"})
    base_url = f"http://{LOOPBACK}:{port}"
    standalone = ServerProcess("airflow standalone", [str(VENV_BIN / "airflow"), "standalone"],
                               tmp_path / "standalone.log", env=env,
                               ready=lambda: readiness.http_ok(f"{base_url}/api/v2/monitor/health"))
    standalone.start(timeout=360)
    airflow = AirflowServer(standalone, base_url, tmp_path / "airflow")
    shots = tmp_path / "screenshots"
    shots.mkdir()

    def shot(page, name: str) -> None:
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)

    try:
        with airflow.client("operator") as client:
            for dag_id in (DAG_ID, BROWSER_DAG_ID, SLOTS_DAG_ID):
                wait_for(lambda dag_id=dag_id: client.get(f"/api/v2/dags/{dag_id}").status_code == 200, 180,
                         f"the DAG {dag_id} was parsed", airflow.log_tail)
            wait_for(lambda: SlotHosts(redis_client).live_capacity().slots == 2, 60, "the slot host advertised",
                     airflow.log_tail)
            first_run = trigger(client, DAG_ID)
            browser_run = trigger(client, BROWSER_DAG_ID)
            trigger(client, SLOTS_DAG_ID)  # at once rather than at the next minute: it waits for the browser work

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(browser_settings.chromium_executable),
                                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                # Airflow's UI while three DAG runs start and three servers work beside it on two loaded cores:
                # its first page (the bundle) took over 30 s (Playwright's default) once in CI
                page.set_default_navigation_timeout(120_000)
                page.set_default_timeout(60_000)
                page.goto(f"{base_url}/")
                page.fill("input[name=username]", "operator")
                page.fill("input[name=password]", USERS["operator"][1])
                page.keyboard.press("Enter")
                page.get_by_role("link", name="Harvester").first.click()
                frame = page.frame_locator("iframe")
                source_row = frame.locator(f"#sources-table tr[data-source={SOURCE}]")
                expect(source_row).to_be_visible(timeout=60_000)
                # while the first run harvests: the table moves (pages stored) and the limits show
                wait_for(lambda: int(source_row.locator("td").nth(4).inner_text() or 0) > 0, 120,
                         "the sources table showed stored pages", airflow.log_tail)
                expect(source_row.locator("td").nth(2)).to_contain_text("/ 2")
                # the browser harvest: page_slots created SG slots, the slot host renders through the SG proxy
                chart = frame.locator("#slots-chart")
                expect(chart).to_be_visible()
                sg_proxy_row = frame.locator("#proxy-table tr[data-country=SG]")
                wait_for(lambda: sg_proxy_row.count() and int(sg_proxy_row.get_attribute("data-bytes") or 0) > 0,
                         180, "the page showed bytes through the SG proxy", airflow.log_tail)
                sg_slots = chart_slots(chart, "SG")
                assert sum(sg_slots.values()) == 2, sg_slots  # the host's whole capacity goes to SG
                assert set(sg_slots) <= {"NO_PAGE", "PREPARING_PAGE", "PAGE_READY", "RUNNING_SCRAPING_TASK",
                                         "CLOSING_PAGE"} and set(sg_slots) & {"PAGE_READY", "RUNNING_SCRAPING_TASK"}
                shown_bytes = int(sg_proxy_row.get_attribute("data-bytes") or 0)
                assert 0 < shown_bytes <= int(redis_client.hget(PageSlotKeys().proxy_bytes, "country:SG") or 0)
                # the pages went through the SG proxy (navigations are fetched by Playwright's route.fetch,
                # which tunnels with CONNECT: counted per host, not per URL)
                proxied = sg_proxy.stats()
                assert proxied["by_host"].get(f"{LOOPBACK}:{demo_site.port}", 0) > 0, proxied["by_host"]
                expect(frame.locator("#last-decision")).to_contain_text("SG")  # the allocator's sentences
                expect(frame.locator(f"#sources-table tr[data-source={BROWSER_SOURCE}]")).to_be_visible()
                shot(page, "1-harvest-running")

                wait_for(lambda: run_state(client, first_run) in ("success", "failed"), 240, "the first run ended",
                         airflow.log_tail)
                assert run_state(client, first_run) == "success", run_failure(client, DAG_ID, first_run, "/api/v2")
                assert "report=success" in run_failure(client, DAG_ID, first_run, "/api/v2")  # what a failure prints
                wait_for(lambda: run_state(client, browser_run, BROWSER_DAG_ID) in ("success", "failed"), 240,
                         "the browser run ended", airflow.log_tail)
                assert run_state(client, browser_run, BROWSER_DAG_ID) == "success", run_failure(
                    client, BROWSER_DAG_ID, browser_run, "/api/v2")
                browser_row = frame.locator(f"#sources-table tr[data-source={BROWSER_SOURCE}]")
                expect(browser_row.locator("td").nth(4)).to_have_text("24", timeout=30_000)
                assert DeadLetters(redis_client).count(SOURCE) == 1
                expect(frame.locator("#dead-letters tr.dead-letter")).to_have_count(1, timeout=30_000)
                expect(frame.locator("#dead-letters")).to_contain_text("http_500")
                shot(page, "2-first-run-done")

                # the site changes its markup: price is no longer span.price
                urllib.request.urlopen(urllib.request.Request(f"{demo_site.url}/_markup?price=cost",
                                                              method="POST", data=b""), timeout=5).close()
                # a job from the page: the products again, through POST /harvester/api/jobs
                frame.locator("#job-source").select_option(SOURCE)
                frame.locator("#job-urls").fill("\n".join(pages[:12]))
                frame.locator("#job-form button[type=submit]").click()
                job_result = frame.locator("#job-result")
                expect(job_result).to_contain_text("started", timeout=30_000)
                second_run = job_result.get_attribute("data-run-id")
                assert second_run and second_run != first_run
                expect(frame.locator(f"#runs-table tr[data-run='{second_run}']")).to_be_visible(timeout=60_000)
                wait_for(lambda: run_state(client, second_run) in ("success", "failed"), 240,
                         "the job's run ended", airflow.log_tail)
                assert run_state(client, second_run) == "success", run_failure(client, DAG_ID, second_run, "/api/v2")
                conf = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{second_run}").json()["conf"]
                assert conf == {"urls": pages[:12]}

                drift = frame.locator(f"#health-table tr[data-source={SOURCE}][data-attribute=price]")
                expect(drift).to_have_attribute("data-drift", "yes", timeout=30_000)
                expect(source_row.locator("td.drift")).to_contain_text("selector drift: price")
                expect(frame.locator(f"#health-table tr[data-source={SOURCE}][data-attribute=title]")
                       ).to_have_attribute("data-drift", "no")
                shot(page, "3-selector-drift")
                report = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{second_run}/taskInstances/report/"
                                    "xcomEntries/return_value").json()["value"]
                assert "price" in str(report) and "selector_drift" in str(report)

                # requeue: the flaky page now answers, so the dead letter leaves the list for good
                frame.locator("#dead-source").select_option(SOURCE)
                frame.locator("#requeue").click()
                expect(frame.locator("#requeue-result")).to_contain_text("1 requeued", timeout=30_000)
                expect(frame.locator("#dead-letters tr.dead-letter")).to_have_count(0, timeout=30_000)
                shot(page, "4-dead-letter-requeued")

                # the Harvest progress tab of the job's run: rate and ETA
                page.goto(f"{base_url}/dags/{DAG_ID}/runs/{second_run}/plugin/harvest-progress")
                tab = page.frame_locator("iframe")
                expect(tab.locator("#progress-table tr[data-figure='pages per minute']")).to_be_visible(
                    timeout=60_000)
                expect(tab.locator("#progress-table tr[data-figure=ETA]")).to_contain_text("done")
                shot(page, "5-harvest-progress-tab")
                browser.close()
    finally:
        standalone.stop()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for picture in shots.glob("*.png"):
            shutil.copy(picture, ARTIFACTS / picture.name)
        (ARTIFACTS / "standalone.log.tail").write_text(airflow.log_tail())

