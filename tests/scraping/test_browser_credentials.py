"""Credentials in the browser reach only the origins they are bound to, on every hop: the source's connection
names the site (127.0.0.1), and the site redirects the task's own navigation, and an image a page adds, to
another host (127.0.0.2). Playwright carries headers added by ``route.continue_`` across redirects without
showing the hops to the route, so the guard fetches each bound hop itself and lets Chromium follow the redirect
as a new request, which the route decides again."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from harvester.settings import HarvesterSettings

from tests.fixtures.demo_site import demo_source
from tests.fixtures.hostile_hosts import ALLOW_BOTH

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PAGE = '<html><body><h1 class="title">a page</h1><span class="sku">SKU-1</span>{extra}</body></html>'


def carries_credentials(headers: dict[str, str]) -> bool:
    return "x-api-key" in headers or "authorization" in headers or "s-456" in headers.get("cookie", "")


def render_with_login(site, monkeypatch, urls: list[str]) -> list:
    monkeypatch.setenv("AIRFLOW_CONN_BROWSER_LOGIN", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": site.port, "schema": "http", "login": "crawler",
        "password": "pa55", "extra": {"headers": {"X-Api-Key": "k-123"}, "cookies": {"session": "s-456"}}}))
    source = demo_source(site.url, "browser_bound", render="browser", country="SG", http_connection_id="browser_login",
                         robots="ignore", blocked_resource_types=[])
    settings = HarvesterSettings(allowed_private_networks=ALLOW_BOTH, page_slot_retry_delay_seconds=0.05)

    async def render_all() -> list:
        from harvester.scraping.browser.slot_browser import SlotBrowser

        async with SlotBrowser("credentials", None, settings) as browser:
            return [(await browser.render(url, source)).fetch for url in urls]

    return asyncio.run(render_all())


def redirect_to(location: str):
    async def handler(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(location)
    return handler


def test_the_navigation_redirected_to_another_host_arrives_there_without_the_login(site, attacker,
                                                                                    monkeypatch) -> None:
    site.route("/product/1", redirect_to(f"{attacker.url}/steal"))
    attacker.route("/steal", text=PAGE.format(extra=""), content_type="text/html")
    [fetch] = render_with_login(site, monkeypatch, [f"{site.url}/product/1"])
    assert fetch.ok and fetch.final_url == f"{attacker.url}/steal", (fetch.reason, fetch.final_url)
    assert carries_credentials(site.headers_of("/product/1")[0]), site.headers_of("/product/1")
    arrived = attacker.headers_of("/steal")
    assert arrived and not any(carries_credentials(seen) for seen in arrived), arrived


def test_an_image_the_page_adds_that_redirects_to_another_host_arrives_there_without_the_login(site, attacker,
                                                                                                 monkeypatch) -> None:
    image = f'<img src="{site.url}/pixel" onload="document.body.insertAdjacentHTML(\'beforeend\', ' \
            f'\'<span class=loaded>1</span>\')">'
    site.route("/product/1", text=PAGE.format(extra=image), content_type="text/html")
    site.route("/pixel", redirect_to(f"{attacker.url}/pixel.gif"))
    gif = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")
    attacker.route("/pixel.gif", body=gif, content_type="image/gif")
    [fetch] = render_with_login(site, monkeypatch, [f"{site.url}/product/1"])
    assert fetch.ok, fetch.reason
    assert carries_credentials(site.headers_of("/pixel")[0]), site.headers_of("/pixel")
    assert attacker.headers_of("/pixel.gif"), attacker.paths()
    assert not any(carries_credentials(seen) for seen in attacker.headers_of("/pixel.gif")), \
        attacker.headers_of("/pixel.gif")


def test_a_redirect_that_stays_on_the_bound_origin_keeps_the_login_on_every_hop(site, monkeypatch) -> None:
    site.route("/product/1", redirect_to("/product/2"))
    site.route("/product/2", text=PAGE.format(extra=""), content_type="text/html")
    [fetch] = render_with_login(site, monkeypatch, [f"{site.url}/product/1"])
    assert fetch.ok and fetch.final_url == f"{site.url}/product/2", (fetch.reason, fetch.final_url)
    assert carries_credentials(site.headers_of("/product/1")[0])
    assert carries_credentials(site.headers_of("/product/2")[0]), site.headers_of("/product/2")


def test_each_context_is_routed_before_its_page_opens(site, monkeypatch) -> None:
    """Playwright turns a context's route on only in the pages it has finished opening: a page still opening
    when the route is added keeps none, and its requests never reach the guard. Opening the page and routing the
    context at once (they were gathered) let one in N task contexts under load fetch the credentialed page
    without its login, and fetch the favicon the source blocks. Timing cannot make that race happen on demand;
    the order that rules it out can be checked every time: the route is in place before the page is asked for."""
    from harvester.scraping.browser import page_guard
    from playwright.async_api import BrowserContext

    order: list[tuple[str, int]] = []
    attach, new_page = page_guard.ContextGuard.attach, BrowserContext.new_page

    async def attaching(guard, context) -> None:
        await attach(guard, context)
        order.append(("routed", id(context)))

    async def opening(context, *args, **kwargs):
        order.append(("page", id(context)))
        return await new_page(context, *args, **kwargs)

    monkeypatch.setattr(page_guard.ContextGuard, "attach", attaching)
    monkeypatch.setattr(BrowserContext, "new_page", opening)
    for index in range(3):
        site.route(f"/product/{index}", text=PAGE.format(extra=""), content_type="text/html")
    fetches = render_with_login(site, monkeypatch, [f"{site.url}/product/{index}" for index in range(3)])
    assert all(fetch.ok for fetch in fetches), [fetch.reason for fetch in fetches]
    pages = [context for step, context in order if step == "page"]
    assert pages and all(order.index(("routed", context)) < order.index(("page", context)) for context in pages), \
        order
    assert all(carries_credentials(seen.headers) for seen in site.seen), [(seen.path, seen.headers)
                                                                           for seen in site.seen]
