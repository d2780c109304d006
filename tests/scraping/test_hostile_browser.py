"""The browser path refuses what the HTTP path refuses: navigations and redirect hops to
forbidden addresses or schemes, through Playwright routing in a real Chromium."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote

import pytest
from harvester.scraping import render_page
from harvester.services.ports import LOOPBACK
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("target,reason", [
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://127.0.0.2:{port}/product/1", "loopback"),
])
def test_browser_redirects_to_forbidden_addresses_are_refused(demo_site, target: str, reason: str) -> None:
    source = demo_source(demo_site.url, render="browser", country="SG")
    url = f"{demo_site.url}/hostile/redirect?to={target.format(port=demo_site.port)}"
    fetch = asyncio.run(render_page(url, source, HarvesterSettings()))
    assert fetch.outcome == "refused" and reason in fetch.reason
    assert not fetch.retryable


def test_browser_navigation_to_loopback_without_allow_list_is_refused(demo_site) -> None:
    source = demo_source(demo_site.url, render="browser", country="SG")
    fetch = asyncio.run(render_page(f"{demo_site.url}/product/1", source,
                                    HarvesterSettings(allowed_private_networks="")))
    assert fetch.outcome == "refused" and "loopback" in fetch.reason


def test_browser_still_renders_allowed_pages_and_redirects(demo_site) -> None:
    source = demo_source(demo_site.url, render="browser", country="SG")
    fetch = asyncio.run(render_page(f"{demo_site.url}/redirect/2", source, HarvesterSettings()))
    assert fetch.ok and "SKU-00003" in fetch.text and fetch.final_url.endswith("/product/3")


# -- the guard on the whole browser: what a page itself tries, beyond its navigation ----------------------
def guard_cases(secret) -> dict[str, str]:
    """Each page tries to reach the secret server (a loopback port the address rules do not allow) in one way."""
    redirect = quote(f"/hostile/redirect?to={secret.url}/image", safe="")
    return {
        "popup": f"/guard/popup?to={quote(secret.url + '/popup', safe='')}",
        "websocket": f"/guard/websocket?to={quote(f'ws://{secret.address}/socket', safe='')}",
        "localhost_name": f"/guard/fetch?to={quote(f'http://secret.localhost:{secret.port}/', safe='')}",
        # Chromium is told secret.test is loopback (a name only the browser's resolver knows, as split DNS
        # would have it): a guard that lets names it cannot resolve through would let Chromium reach it
        "unresolvable_name": f"/guard/fetch?to={quote(f'http://secret.test:{secret.port}/', safe='')}",
        "redirecting_image": f"/guard/image?to={redirect}",
        "service_worker": f"/guard/service-worker?to={quote(secret.url + '/worker', safe='')}",
    }


@pytest.mark.parametrize("case", ["popup", "websocket", "localhost_name", "unresolvable_name", "redirecting_image",
                                  "service_worker"])
def test_what_a_page_tries_on_its_own_never_reaches_a_refused_address(demo_site, secret_server, monkeypatch,
                                                                      case: str) -> None:
    from harvester.scraping.browser import page_load as browser  # the launch flags are read at launch

    monkeypatch.setattr(browser, "CHROMIUM_ARGS",
                        [*browser.CHROMIUM_ARGS, f"--host-resolver-rules=MAP secret.test {LOOPBACK}"])
    source = demo_source(demo_site.url, render="browser", country="SG", blocked_resource_types=[],
                         attributes={"sku": {"css": "span.sku", "required": True},  # ready once the attack had 1 s:
                                     "probe": {"css": "span.probe.settled", "required": True}})
    settings = HarvesterSettings(allowed_private_networks=f"{LOOPBACK}/32:{demo_site.port}")
    url = demo_site.url + guard_cases(secret_server)[case]
    fetch = asyncio.run(render_page(url, source, settings))
    assert fetch.ok and "SKU-00001" in fetch.text, fetch.reason  # the page itself is an ordinary product
    assert secret_server.lines == [], f"{case} reached the refused address"
    if case != "service_worker":  # a blocked service worker never registers: nothing is left to refuse
        assert fetch.blocked_requests >= 1  # the guard's refusal is counted with the page


def test_a_navigation_body_is_cut_while_it_streams_not_after_it_was_decompressed(demo_site) -> None:
    """A 1 GB page gzipped to 1 MB: the browser stops it once its decoded bytes pass the cap, in seconds."""
    source = demo_source(demo_site.url, render="browser", country="SG", timeout=30)
    settings = HarvesterSettings(body_size_cap_bytes=1 << 20)
    bomb = f"{demo_site.url}/hostile/gzip-bomb?mb=1024&layers=1"
    demo_site.warm("/hostile/gzip-bomb?mb=1024&layers=1")  # the site builds (and caches) the bomb first: not ours
    started = time.monotonic()
    fetch = asyncio.run(asyncio.wait_for(render_page(bomb, source,
                                                     settings), 60))
    assert fetch.ok and fetch.truncated, fetch.reason
    assert "body cut" in fetch.reason and len(fetch.text.encode()) <= 1 << 20
    assert time.monotonic() - started < 20


# -- credentials in the browser go where the HTTP fetcher's go ------------------------------------------
def test_a_browser_task_on_another_host_never_gets_the_connections_credentials(site, attacker, monkeypatch) -> None:
    """The connection names the site's host: a task whose URL is on another host (a link the site wrote) is
    rendered without the connection's headers, basic auth or cookies, as the HTTP fetcher sends them (the page
    guard used to send them to whatever host the task's URL named)."""
    import json

    from tests.fixtures.hostile_hosts import ALLOW_BOTH

    page = '<html><body><h1 class="title">a page</h1><span class="sku">SKU-1</span></body></html>'
    site.route("/product/1", text=page, content_type="text/html")
    attacker.route("/steal", text=page, content_type="text/html")
    monkeypatch.setenv("AIRFLOW_CONN_BROWSER_LOGIN", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": site.port, "schema": "http", "login": "crawler",
        "password": "pa55", "extra": {"headers": {"X-Api-Key": "k-123"}, "cookies": {"session": "s-456"}}}))
    source = demo_source(site.url, "browser_bound", render="browser", country="SG", http_connection_id="browser_login",
                         robots="ignore", blocked_resource_types=[])
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH, page_slot_retry_delay_seconds=0.05)

    async def both() -> list:
        from harvester.scraping.browser.slot_browser import SlotBrowser

        async with SlotBrowser("credentials", None, settings) as browser:
            return [(await browser.render(url, source)).fetch for url in (f"{site.url}/product/1",
                                                                            f"{attacker.url}/steal")]

    own, other = asyncio.run(both())
    assert own.ok and other.ok, (own.reason, other.reason)

    def carries(headers: dict[str, str]) -> bool:
        return "x-api-key" in headers or "authorization" in headers or "s-456" in headers.get("cookie", "")

    assert carries(site.headers_of("/product/1")[0]), site.headers_of("/product/1")
    assert attacker.headers_of("/steal") and not any(carries(seen) for seen in attacker.headers_of("/steal")), \
        attacker.headers_of("/steal")


def test_a_task_isolated_browser_source_resolves_its_connection_once_a_minute_not_per_task(site, monkeypatch) -> None:
    """Each task of a ``browser.isolation: task`` source opens a context of its own; resolving the connection (an
    Airflow metadata query where Airflow holds it) ran, synchronously on the slot's loop, for every one of them,
    where the HTTP fetcher keeps it a minute."""
    import json

    from harvester.connections import resolve_http
    from harvester.scraping.browser import slot_browser
    from harvester.scraping.fetching import outgoing

    from tests.fixtures.hostile_hosts import ALLOW_BOTH

    page = '<html><body><h1 class="title">a page</h1><span class="sku">SKU-1</span></body></html>'
    for index in range(3):
        site.route(f"/product/{index}", text=page, content_type="text/html")
    monkeypatch.setenv("AIRFLOW_CONN_ISOLATED_LOGIN", json.dumps({"conn_type": "http", "login": "crawler",
                                                                   "password": "pa55"}))
    resolved: list[str] = []

    def counting(connection_id: str, *args: object, **kwargs: object) -> object:
        resolved.append(connection_id)
        return resolve_http(connection_id, *args, **kwargs)

    for module in (outgoing, slot_browser):
        monkeypatch.setattr(module, "resolve_http", counting, raising=False)
    source = demo_source(site.url, "isolated", render="browser", country="SG", http_connection_id="isolated_login",
                         robots="ignore", browser={"isolation": "task"})
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH, page_slot_retry_delay_seconds=0.05)

    async def three() -> list:
        async with slot_browser.SlotBrowser("isolated", None, settings) as browser:
            return [(await browser.render(f"{site.url}/product/{index}", source)).fetch for index in range(3)]

    fetches = asyncio.run(three())
    assert all(fetch.ok for fetch in fetches), [fetch.reason for fetch in fetches]
    assert all(carried.get("authorization") for carried in site.headers_of("/product/2"))
    assert resolved == ["isolated_login"]
