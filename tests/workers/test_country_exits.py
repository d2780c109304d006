"""HTTP sources with a ``country`` go out through that country's proxy pool (harvester.pageslots.proxy_pool
.CountryExits under the fetcher): the batch runner against real Redis, MongoDB, the demo site and two
`harvester forward-proxy` processes as the SG pool. Every request of the source, robots.txt included, is counted
at the SG proxies; the address rules still hold for the target; a source without a country goes direct."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from harvester.distributor import TaskMessage
from harvester.workers.batch import BatchRunner

from tests.workers.conftest import Crawl
from tests.workers.test_batch import dead_reasons, records, run_until_idle

pytestmark = pytest.mark.integration


@pytest.fixture
def sg_pool(forward_proxy_factory, monkeypatch):
    proxies = [forward_proxy_factory("SG-1"), forward_proxy_factory("SG-2")]
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG", proxies[0].url)
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG_2", proxies[1].url)
    return proxies


def paths_seen(proxies) -> list[str]:
    return sorted(urlsplit(url)._replace(scheme="", netloc="").geturl() for proxy in proxies
                  for url in proxy.stats()["urls"])


def test_every_request_of_an_sg_source_goes_through_the_sg_pool_robots_txt_included(
        sg_pool, write_source, crawl, demo_site, mongo_server, worker_settings, redis_client) -> None:
    source = write_source("sg_http", country="SG", robots="obey",
                          listing={"link_selectors": ["a.product-link"], "max_depth": 1,
                                   "follow": r"^http://127\.0\.0\.1:\d+/product/\d+$"})
    crawl.push(source, TaskMessage(source=source.name, kind="listing", url=f"{demo_site.url}/shop?per_page=20"))
    run_until_idle(crawl, source)
    assert records(mongo_server, worker_settings, source).count_documents({}) == 20
    assert dead_reasons(redis_client, source) == []
    seen = paths_seen(sg_pool)
    assert "/robots.txt" in seen and "/shop?per_page=20" in seen
    assert sum(1 for path in seen if path.startswith("/product/")) == 20
    # one session per source and host: its requests keep to one exit (its cookies with it), as a visitor would
    assert sorted(proxy.stats()["requests"] > 0 for proxy in sg_pool) == [False, True]
    site_saw = demo_site.requests_of(source.name)
    # nothing of the source reached the site but through the pool (the site does not tell robots.txt by client)
    assert sorted(site_saw["paths"]) == [path for path in seen if path != "/robots.txt"]


def test_a_source_without_a_country_goes_direct_and_a_refused_address_stays_refused_through_the_pool(
        sg_pool, write_source, crawl, demo_site, redis_client, worker_settings) -> None:
    direct = write_source("direct_http")
    crawl.push(direct, TaskMessage(source=direct.name, kind="details", url=f"{demo_site.url}/product/1"))
    run_until_idle(crawl, direct)
    assert paths_seen(sg_pool) == []
    refused = write_source("sg_refused", country="SG")
    crawl.push(refused, TaskMessage(source=refused.name, kind="details", url="http://169.254.169.254/latest/"))
    run_until_idle(crawl, refused)
    assert any("link-local" in reason or "refused" in reason for reason in dead_reasons(redis_client, refused))
    assert all(proxy.stats()["requests"] == 0 for proxy in sg_pool)


def test_a_pool_with_no_living_proxy_ends_the_page_proxy_error_never_charged_to_the_site(
        worker_settings, write_source, redis_client, monkeypatch, demo_site, forward_proxy_factory, mongo_server
) -> None:
    """With retries: 0 a single charged failure would dead-letter the task: a proxy_error hands it back with the
    same attempt, and the next worker, whose pool has a living proxy, stores it."""
    from harvester.services.ports import free_port

    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG", f"http://127.0.0.1:{free_port('127.0.0.1')}")
    runner = BatchRunner(worker_settings)
    source = write_source("sg_dead_pool", country="SG", retries=0)
    try:
        crawl = Crawl(runner, redis_client)
        crawl.push(source, TaskMessage(source=source.name, kind="details", url=f"{demo_site.url}/product/1"))
        assert crawl.step(source) is not None
        counters = crawl.store.counters(source.name)
        assert counters.get("outcome:proxy_error") == 1, sorted(counters.items())
        assert dead_reasons(redis_client, source) == []
        assert crawl.store.stats([source.name])[source.name].delayed == 1
    finally:
        runner.close()
    living = forward_proxy_factory("SG-living")
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG", living.url)
    runner = BatchRunner(worker_settings)
    try:
        crawl = Crawl(runner, redis_client)
        run_until_idle(crawl, source)
        assert dead_reasons(redis_client, source) == []
        assert records(mongo_server, worker_settings, source).count_documents({}) == 1
        assert living.stats()["requests"] >= 1
    finally:
        runner.close()
