"""Hostile sites beyond the first caps, on the fetch side, each against real servers: the source's site on
127.0.0.1 and an "attacker" host on 127.0.0.2 (tests.fixtures.hostile_hosts), test host names answered by the
event loop's resolver, a slow resolver. Each case was committed failing against the code before the fix."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time

import pytest
from aiohttp import web
from harvester.scraping.discovery.links import discover_links
from harvester.scraping.fetching.addresses import AddressGuard, AddressRefused, parse_allowed_networks
from harvester.scraping.fetching.fetcher import Fetcher, FetchResult
from harvester.scraping.fetching.robots import RobotsCache, RobotsRules
from harvester.scraping.page import process_page
from harvester.settings import HarvesterSettings
from parsel import Selector

from tests.fixtures.demo_site import demo_source
from tests.fixtures.hostile_hosts import ALLOW_BOTH, ATTACKER_ADDRESS, RecordingSite, run_with_names

pytestmark = pytest.mark.integration
SECRET_HEADERS = ("authorization", "x-api-key")


def settings(**overrides: object) -> HarvesterSettings:
    return HarvesterSettings(**{"allowed_private_networks": ALLOW_BOTH, **overrides})


def fetch_all(options: HarvesterSettings, source, urls: list[str], names: dict[str, str] | None = None,
              redis_client=None) -> list[FetchResult]:
    async def run() -> list[FetchResult]:
        robots = RobotsCache.from_settings(options, redis_client)
        async with Fetcher(options, robots=robots) as fetcher:
            return [await fetcher.fetch(url, source) for url in urls]

    return run_with_names(run(), names)


def connection(monkeypatch, name: str, host: str | None = None, port: int | None = None, **extra: object) -> str:
    document: dict[str, object] = {"conn_type": "http", "login": "crawler", "password": "pa55",
                                   "extra": {"headers": {"X-Api-Key": "k-123"}, "cookies": {"session": "s-456"},
                                             **extra}}
    if host is not None:
        document.update(host=host, port=port, schema="http")
    monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps(document))
    return name


def carries_credentials(headers: dict[str, str]) -> bool:
    return any(name in headers for name in SECRET_HEADERS) or "s-456" in headers.get("cookie", "")


# -- credentials bound to the connection's host ---------------------------------------------------------
def test_a_task_on_another_host_never_gets_the_connections_credentials(site, attacker, monkeypatch) -> None:
    """A detail or next-page link to another host became a task whose first URL was that host: it got the login."""
    site.route("/product/1", text="<h1>one</h1>", content_type="text/html")
    attacker.route("/steal", text="<h1>mine</h1>", content_type="text/html")
    name = connection(monkeypatch, "shop_login", host="127.0.0.1", port=site.port)
    source = demo_source(site.url, "bound", http_connection_id=name, robots="ignore")
    results = fetch_all(settings(), source, [f"{site.url}/product/1", f"{attacker.url}/steal"])
    assert all(result.ok for result in results)
    assert carries_credentials(site.headers_of("/product/1")[0])
    assert not carries_credentials(attacker.headers_of("/steal")[0]), attacker.headers_of("/steal")


def test_without_a_connection_host_credentials_go_to_the_seeds_hosts_only(site, attacker, monkeypatch) -> None:
    site.route("/product/2", text="two", content_type="text/html")
    attacker.route("/elsewhere", text="x", content_type="text/html")
    site.route("/hop", status=302, headers={"Location": f"{attacker.url}/elsewhere"})
    name = connection(monkeypatch, "seed_login")
    source = demo_source(site.url, "seeded", http_connection_id=name, robots="ignore")
    fetch_all(settings(), source, [f"{site.url}/product/2", f"{attacker.url}/elsewhere", f"{site.url}/hop"])
    assert carries_credentials(site.headers_of("/product/2")[0])
    assert not any(carries_credentials(headers) for headers in attacker.headers_of("/elsewhere"))


def test_another_port_of_the_connection_host_gets_nothing(site, monkeypatch) -> None:
    other = RecordingSite("127.0.0.1")
    other.start()
    try:
        other.route("/p", text="p", content_type="text/html")
        name = connection(monkeypatch, "port_login", host="127.0.0.1", port=site.port)
        source = demo_source(site.url, "ports", http_connection_id=name, robots="ignore")
        assert fetch_all(settings(), source, [f"{other.url}/p"])[0].ok
        assert not carries_credentials(other.headers_of("/p")[0])
    finally:
        other.stop()


def test_robots_txt_of_another_host_is_fetched_without_credentials(site, attacker, monkeypatch) -> None:
    attacker.route("/robots.txt", text="User-agent: *\nAllow: /\n", content_type="text/plain")
    attacker.route("/page", text="page", content_type="text/html")
    name = connection(monkeypatch, "robots_login", host="127.0.0.1", port=site.port)
    source = demo_source(site.url, "robots_bound", http_connection_id=name)
    assert fetch_all(settings(), source, [f"{attacker.url}/page"])[0].ok
    assert attacker.headers_of("/robots.txt") and not carries_credentials(attacker.headers_of("/robots.txt")[0])


# -- cookies: a jar per source, public-suffix aware, the connection's cookies win ------------------------
def test_a_cookie_one_source_got_is_never_sent_for_another(site) -> None:
    site.route("/set", text="set", content_type="text/html", headers={"Set-Cookie": "track=t-1; Path=/"})
    site.route("/check", text="check", content_type="text/html")
    options = settings()
    first = demo_source(site.url, "first_source", robots="ignore")
    second = demo_source(site.url, "second_source", robots="ignore")

    async def run() -> None:
        async with Fetcher(options) as fetcher:
            await fetcher.fetch(f"{site.url}/set", first)
            await fetcher.fetch(f"{site.url}/check", first)
            await fetcher.fetch(f"{site.url}/check", second)

    run_with_names(run())
    first_check, second_check = site.headers_of("/check")
    assert "track=t-1" in first_check.get("cookie", "")  # the source's own visit keeps its cookies
    assert "track" not in second_check.get("cookie", ""), second_check


def test_a_cookie_for_a_public_suffix_is_refused(site, attacker) -> None:
    """``Domain=com`` set by shop.com was sent to other.com."""
    names = {"shop.com": "127.0.0.1", "other.com": ATTACKER_ADDRESS}
    site.route("/set", text="set", content_type="text/html",
               headers={"Set-Cookie": "wide=w-1; Domain=com; Path=/"})
    site.route("/own", text="own", content_type="text/html",
               headers={"Set-Cookie": "mine=m-1; Domain=shop.com; Path=/"})
    site.route("/again", text="again", content_type="text/html")
    attacker.route("/check", text="check", content_type="text/html")
    source = demo_source(site.named("shop.com"), "suffix", robots="ignore")
    results = fetch_all(settings(), source, [site.named("shop.com") + "/set", site.named("shop.com") + "/own",
                                             site.named("shop.com") + "/again", attacker.named("other.com") + "/check"],
                        names)
    assert all(result.ok for result in results), results
    assert "mine=m-1" in site.headers_of("/again")[0].get("cookie", "")
    assert "wide" not in site.headers_of("/again")[0].get("cookie", "")
    assert "wide" not in attacker.headers_of("/check")[0].get("cookie", ""), attacker.headers_of("/check")


def test_the_connections_cookie_wins_over_one_the_site_set(site, monkeypatch) -> None:
    site.route("/login", text="in", content_type="text/html", headers={"Set-Cookie": "session=site-chosen; Path=/"})
    site.route("/check", text="check", content_type="text/html")
    name = connection(monkeypatch, "cookie_login", host="127.0.0.1", port=site.port)
    source = demo_source(site.url, "cookies_win", http_connection_id=name, robots="ignore")
    fetch_all(settings(), source, [f"{site.url}/login", f"{site.url}/check"])
    cookie = site.headers_of("/check")[0].get("cookie", "")
    assert "session=s-456" in cookie and "site-chosen" not in cookie, cookie


@pytest.mark.unit
def test_a_cookie_flood_empties_the_sources_jar_and_the_jars_are_bounded_by_source() -> None:
    """The jar's two caps (cookies.py), untested before: a site that sets more cookies than a jar keeps loses
    them all (not the worker's memory), and past ``max_sources`` jars the least recently used source's goes."""
    from harvester.scraping.fetching.cookies import SourceCookieJars

    jars = SourceCookieJars(max_sources=2, max_cookies=50, max_per_host=1000)  # the per-host cap is tested apart
    jars.store("flooded", "http://shop.example/", [f"c{index}=v; Path=/" for index in range(51)])
    assert jars.header("flooded", "http://shop.example/") is None and len(jars.jar("flooded")) == 0
    jars.store("flooded", "http://shop.example/", [f"c{index}=v; Path=/" for index in range(50)])
    assert len(jars.jar("flooded")) == 50  # at the cap: kept
    jars.store("first", "http://a.example/", ["a=1; Path=/"])
    jars.store("second", "http://b.example/", ["b=2; Path=/"])
    assert jars.header("second", "http://b.example/") == "b=2"
    assert jars.header("first", "http://a.example/") == "a=1"  # "flooded" was the least recently used: gone
    assert len(jars.jar("flooded")) == 0 and jars.header("second", "http://b.example/") is None


# -- httpx: checked before anything is written, no proxy from the environment --------------------------
def test_httpx_ignores_proxies_from_the_environment(site, monkeypatch) -> None:
    site.route("/direct", text="direct", content_type="text/html")
    closed = RecordingSite("127.0.0.1")  # a port nobody listens on once stopped
    closed.start()
    closed.stop()
    for variable in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(variable, closed.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    source = demo_source(site.url, "no_proxy", robots="ignore")
    result = fetch_all(settings(http2=True), source, [f"{site.url}/direct"])[0]
    assert result.ok, result.reason


@pytest.mark.parametrize("http2", [False, True], ids=["aiohttp", "httpx"])
def test_a_refused_peer_is_refused_before_the_request_is_written(site, monkeypatch, http2: bool) -> None:
    """A new connection to an address the guard now refuses (a rebinding name's second answer: the pre-check
    remembered the first) must not carry the GET, credentials and all."""
    site.route("/again", text="again", content_type="text/html", headers={"Connection": "close"})
    name = connection(monkeypatch, "rebind_login", host="127.0.0.1", port=site.port)
    source = demo_source(site.url, "rebind", http_connection_id=name, robots="ignore")

    async def run() -> tuple[FetchResult, FetchResult]:
        async with Fetcher(settings(http2=http2)) as fetcher:
            first = await fetcher.fetch(f"{site.url}/again", source)
            fetcher.guard.allowed = ()  # the name's verdict is remembered; the next connection's peer is not
            return first, await fetcher.fetch(f"{site.url}/again", source)

    first, second = run_with_names(run())
    assert first.ok
    assert second.outcome == "refused" and "loopback" in second.reason
    assert site.paths().count("/again") == 1, site.paths()


# -- next-page links: follow_pages or the same site, capped ---------------------------------------------
def listing_of(links: list[str]) -> Selector:
    body = "".join(f'<a class="next" href="{link}">n</a>' for link in links)
    return Selector(text=f"<html><body>{body}</body></html>")


@pytest.mark.unit
def test_next_page_links_stay_on_the_site_unless_follow_pages_says_otherwise() -> None:
    source = demo_source("http://shop.com", "pages")
    page = listing_of(["/shop?page=2", "http://evil.example/shop?page=3", "http://www.shop.com/shop?page=4"])
    found = discover_links(source, "http://shop.com/shop", page, 0)
    assert found.listings == ["http://shop.com/shop?page=2", "http://www.shop.com/shop?page=4"]
    assert found.ignored.get("not_followed") == 1
    pattern = demo_source("http://shop.com", "pages", listing={
        "link_selectors": ["a.product"], "next_page_selectors": ["a.next"], "follow_pages": r"page=[23]$"})
    assert discover_links(pattern, "http://shop.com/shop", page, 0).listings == [
        "http://shop.com/shop?page=2", "http://evil.example/shop?page=3"]


@pytest.mark.unit
def test_next_pages_of_one_page_are_capped_and_counted() -> None:
    source = demo_source("http://shop.com", "many_pages")
    page = listing_of([f"/shop?page={n}" for n in range(5000)])
    found = discover_links(source, "http://shop.com/shop", page, 0, max_next_pages=20)
    assert len(found.listings) == 20 and found.ignored["over_next_pages_per_page"] == 4980


# -- link screening: distinct hosts and a time budget ---------------------------------------------------
def test_link_screening_is_bounded_in_hosts_and_time() -> None:
    """300 slow names took 10 s: now at most max_hosts are resolved, within the budget; the rest are dropped."""
    guard = AddressGuard(())
    urls = [f"http://host-{n}.example/product/{n}" for n in range(300)]
    names = {f"host-{n}.example": "93.184.215.14" for n in range(300)}

    async def run() -> tuple[dict[str, str], float]:
        started = time.monotonic()
        refused = await guard.refusals(urls, max_hosts=50, budget_seconds=0.5)
        return refused, time.monotonic() - started

    refused, elapsed = run_with_names(run(), names, delay=2.0)
    assert elapsed < 1.9  # the budget ended the lookups, not the resolver
    assert len(refused) == 300
    assert sum("distinct hosts" in reason for reason in refused.values()) == 250
    assert sum("time budget" in reason for reason in refused.values()) == 50


# -- raw bytes, markup before lxml, robots.txt bounds ---------------------------------------------------
def test_raw_bytes_that_decode_to_nothing_are_capped(site) -> None:
    empty_block = b"\x00\x00\x00\xff\xff"  # an empty stored deflate block: decodes to no byte at all

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html", "Content-Encoding": "deflate"})
        await response.prepare(request)
        await response.write(b"\x78\x9c")  # a zlib header, then nothing but empty blocks
        for _ in range(2000):  # 2000 x 20 KiB = 40 MB of nothing, or until the client goes
            try:
                await response.write(empty_block * 4096)
            except ConnectionError:
                break
        return response

    site.route("/nothing", endless)
    source = demo_source(site.url, "nothing", robots="ignore", timeout=60)
    result = fetch_all(settings(raw_body_cap_bytes=1024 * 1024), source, [f"{site.url}/nothing"])[0]
    assert result.outcome == "decode_error" and "raw bytes" in result.reason, (result.outcome, result.reason)


@pytest.mark.unit
def test_a_sitemap_of_bytes_that_decode_to_nothing_is_cut_at_the_wire_cap_not_read_until_the_timeout() -> None:
    """Sitemaps read their body through the pages' wire cap (bodies.WireCap): endless empty deflate blocks end
    the sitemap as cut, with the reason, after the cap's bytes (it had its own copy of the cap, and no test)."""
    from harvester.scraping.discovery.sitemaps import SitemapFetcher, SitemapParser

    class Padding:  # a response whose body is empty deflate blocks for ever (a TransportResponse)
        headers = {"content-encoding": "deflate"}
        read = 0

        async def raw_chunks(self):
            yield b"\x78\x9c"
            while True:
                Padding.read += 5000
                yield b"\x00\x00\x00\xff\xff" * 1000

    async def read() -> object:
        options = settings(raw_body_cap_bytes=100_000, sitemap_max_bytes=50_000)
        async with Fetcher(options) as pages:
            parser = SitemapParser("http://shop.example/sitemap.xml", 1000)
            await SitemapFetcher(options, pages)._read(Padding(), parser)
            return parser.close()

    document = asyncio.run(asyncio.wait_for(read(), 10))
    assert document.cut == "more than 100000 bytes on the wire: the rest is not read"
    assert Padding.read <= 105_000


def test_an_element_with_too_many_attributes_is_refused_before_parsing(site) -> None:
    attributes = " ".join(f"a{n}=x" for n in range(30_000))
    site.route("/wide", text=f"<html><body><div {attributes}>x</div><h1 class='title'>t</h1></body></html>",
               content_type="text/html")
    site.route("/deep", text="<html><body>" + "<i>x</i>" * 50_000 + "</body></html>", content_type="text/html")
    options = settings(max_attributes_per_element=500, max_elements_per_page=20_000)
    source = demo_source(site.url, "wide", robots="ignore")
    wide, deep = fetch_all(options, source, [f"{site.url}/wide", f"{site.url}/deep"])
    started = time.monotonic()
    refused = process_page(source, "details", wide.url, 0, wide, settings=options)
    assert time.monotonic() - started < 2
    assert refused.fetch.outcome == "parse_error" and "attributes" in refused.fetch.reason
    many = process_page(source, "details", deep.url, 0, deep, settings=options)
    assert many.fetch.outcome == "parse_error" and "elements" in many.fetch.reason


@pytest.mark.unit
def test_robots_rules_and_wildcards_are_capped() -> None:
    text = "User-agent: *\n" + "".join(f"Disallow: /a*b*c*d*e*f*g*h*i*j*k*l*{n}\n" for n in range(25_000))
    rules = RobotsRules("http://x", text, 200, max_rules=1000, max_wildcards=5)
    assert rules.dropped_rules == 24_000 and rules.cut_rules == 1000
    started = time.monotonic()
    for n in range(50):
        rules.allowed(f"http://x/a/b/{n}", "Harvester/1")
    assert time.monotonic() - started < 1.0
    assert not rules.allowed("http://x/a1b2c3d4e5f-anything", "Harvester/1")  # a cut Disallow still disallows


# -- 6to4, Teredo, NAT64 ---------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("address,embedded", [
    ("2002:7f00:1::", "127.0.0.1"), ("2002:a9fe:a9fe::1", "169.254.169.254"),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"), ("64:ff9b::7f00:1", "127.0.0.1"),
    ("64:ff9b:1::a00:1", "10.0.0.1"),
])
def test_addresses_that_embed_an_ipv4_address_are_checked_as_that_address(address: str, embedded: str) -> None:
    guard = AddressGuard(parse_allowed_networks(""))
    reason = guard.address_refusal(ipaddress.ip_address(address), 80)
    assert reason is not None and embedded in reason
    with pytest.raises(AddressRefused):
        asyncio.run(guard.check(f"http://[{address}]/"))


@pytest.mark.unit
def test_nat64_of_a_public_address_is_allowed() -> None:
    assert AddressGuard(()).address_refusal(ipaddress.ip_address("64:ff9b::808:808"), 80) is None


# -- robots.txt per RFC 9309 ------------------------------------------------------------------------------
@pytest.mark.parametrize("status,fetched", [(404, True), (401, True), (429, False), (503, False)])
def test_robots_txt_errors_as_rfc_9309_reads_them(site, status: int, fetched: bool) -> None:
    site.route("/robots.txt", status=status, text="nope")
    site.route("/page", text="page", content_type="text/html")
    result = fetch_all(settings(), demo_source(site.url, "rfc"), [f"{site.url}/page"])[0]
    assert result.ok is fetched, (status, result.outcome, result.reason)
    if not fetched:
        assert result.outcome == "robots_unavailable" and result.retryable and "/page" not in site.paths()


def test_an_unreachable_robots_txt_disallows(site) -> None:
    closed = RecordingSite("127.0.0.1")
    closed.start()
    closed.stop()
    result = fetch_all(settings(), demo_source(closed.url, "gone"), [f"{closed.url}/page"])[0]
    assert result.outcome == "host_unreachable" and result.retryable and "robots.txt" in result.reason


def test_the_last_good_robots_txt_is_used_while_the_file_fails(site, redis_client) -> None:
    state = {"status": 200}

    async def robots(request: web.Request) -> web.Response:
        if state["status"] != 200:
            return web.Response(status=state["status"])
        return web.Response(text="User-agent: *\nDisallow: /private\n", content_type="text/plain")

    site.route("/robots.txt", robots)
    site.route("/public", text="public", content_type="text/html")
    site.route("/private", text="private", content_type="text/html")
    source = demo_source(site.url, "last_good")
    first = fetch_all(settings(), source, [f"{site.url}/public"], redis_client=redis_client)[0]
    assert first.ok
    state["status"] = 503
    redis_client.delete(f"harvester:robots:{site.url}")  # the day's copy expired; the site now fails
    public, private = fetch_all(settings(), source, [f"{site.url}/public", f"{site.url}/private"],
                                redis_client=redis_client)
    assert public.ok and private.outcome == "robots_disallowed", (public.outcome, private.outcome)
    assert "/private" not in site.paths()
