"""The demo site as a Starlette app (served by uvicorn; see :mod:`harvester_demo.commands`).

Clients are told apart by the ``X-Demo-Client`` header (sources set it in their ``headers``), falling
back to the peer address, so several crawlers can share one site and each be checked on its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from harvester_demo import assets
from harvester_demo.hostile import HOSTILE_FETCH_PAGES

CLIENT_HEADER = b"x-demo-client"
STATS_PATH = "/_stats"
RECORDED_STARTS_MAX = 200_000  # request starts (and path counts) kept per client
_TAGS = ["garden", "kitchen", "outdoor", "tools", "kids", "office", "sale", "eco"]
_COLOURS = ["red", "green", "blue", "black", "white", "yellow"]


@dataclass
class ClientCounter:
    """Requests of one client: in flight now, the most ever in flight at once, and the total.

    Also when each request started (wall clock, seconds since the epoch) and how often each path
    was asked for, so a test can check ``per_minute`` over any rolling window and "fetched once"
    as the site saw them; both are bounded (``RECORDED_STARTS_MAX``).
    """

    current: int = 0
    max_concurrent: int = 0
    total: int = 0
    statuses: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    robots: int = 0  # fetches of /robots.txt, counted apart: they are not pages of the crawl
    request_times: list[float] = field(default_factory=list)  # when each page request started (monotonic)
    starts: list[float] = field(default_factory=list)  # when each request started (wall clock, s)
    paths: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def record_start(self, path: str) -> None:
        if len(self.starts) < RECORDED_STARTS_MAX:
            self.starts.append(time.time())
            self.paths[path] += 1

    def as_dict(self) -> dict[str, Any]:
        return {"current": self.current, "max_concurrent": self.max_concurrent, "total": self.total,
                "statuses": dict(self.statuses), "robots": self.robots, "request_times": self.request_times[-500:]}


@dataclass
class DemoSite:
    """Site knobs and its in-memory state (counters, per-token fault counts)."""

    products: int = 500
    per_page: int = 20
    latency_ms: float = 20.0
    slow_every: int = 25
    slow_ms: float = 300.0
    clients: dict[str, ClientCounter] = field(default_factory=lambda: defaultdict(ClientCounter))
    token_hits: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    class_renames: dict[str, str] = field(default_factory=dict)  # product markup changes (selector drift demos)

    def reset(self) -> None:
        self.clients.clear()
        self.token_hits.clear()
        self.class_renames.clear()

    def restyle(self, body: str) -> str:
        """Product markup as the site looks now: a renamed class breaks the selectors that named it."""
        for old, new in self.class_renames.items():
            body = body.replace(f'class="{old}"', f'class="{new}"')
        return body

    def stats(self) -> dict[str, Any]:
        everyone = ClientCounter()
        for counter in self.clients.values():
            everyone.total += counter.total
            everyone.max_concurrent = max(everyone.max_concurrent, counter.max_concurrent)
        return {"clients": {name: counter.as_dict() for name, counter in self.clients.items()},
                "total": everyone.total, "products": self.products, "per_page": self.per_page}


class ConcurrencyCounter:
    """ASGI middleware counting in-flight requests per client (the measure of the rate limits)."""

    def __init__(self, app: ASGIApp, site: DemoSite) -> None:
        self.app = app
        self.site = site

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith((STATS_PATH, "/_markup", "/_challenge")):
            await self.app(scope, receive, send)
            return
        client = next((value.decode() for name, value in scope["headers"] if name == CLIENT_HEADER), None)
        if client is None:
            client = scope["client"][0] if scope.get("client") else "unknown"
        counter = self.site.clients[client]
        if scope["path"] == "/robots.txt":
            counter.robots += 1
            await self.app(scope, receive, send)
            return
        counter.request_times.append(time.monotonic())
        counter.current += 1
        counter.total += 1
        counter.max_concurrent = max(counter.max_concurrent, counter.current)
        query = scope.get("query_string", b"").decode()
        counter.record_start(scope["path"] + (f"?{query}" if query else ""))

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                counter.statuses[str(message["status"])] += 1
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            counter.current -= 1


# -- content -----------------------------------------------------------------------------------------
def product_facts(product_id: int) -> dict[str, Any]:
    """Deterministic facts of one product, so tests can compare what was extracted with the truth."""
    digest = hashlib.blake2b(str(product_id).encode(), digest_size=8).digest()
    number = int.from_bytes(digest, "big")
    return {
        "sku": f"SKU-{product_id:05d}",
        "title": f"{_COLOURS[number % len(_COLOURS)].title()} widget {product_id}",
        "price": round(1 + (number % 100_000) / 100, 2),
        "stock": number % 250,
        "in_stock": number % 250 > 0,
        "released": date(2020, 1, 1) + timedelta(days=number % 1800),
        "image": f"/static/img/{product_id}.png",
        "tags": [_TAGS[(number >> shift) % len(_TAGS)] for shift in (3, 7, 11)][: 1 + number % 3],
        "ratings": [1 + (number >> shift) % 5 for shift in (5, 9, 13, 17)][: number % 5],
        "description": None if product_id % 10 == 0 else f"A very useful widget, number {product_id}.",
    }


def product_body(product_id: int, facts: dict[str, Any] | None = None, price_text: str | None = None,
                 stock_text: str | None = None) -> str:
    facts = facts or product_facts(product_id)
    tags = "".join(f'<li class="tag">{html.escape(tag)}</li>' for tag in facts["tags"])
    ratings = "".join(f'<li class="rating">{rating}</li>' for rating in facts["ratings"])
    description = (f'<p class="description">{html.escape(facts["description"])}</p>'
                   if facts["description"] else "")
    price = price_text if price_text is not None else f"€ {facts['price']:,.2f}"
    stock = stock_text if stock_text is not None else str(facts["stock"])
    return (
        f'<article class="product" data-id="{product_id}">'
        f'<h1 class="title">{html.escape(facts["title"])}</h1>'
        f'<span class="sku">{facts["sku"]}</span>'
        f'<span class="price" data-currency="EUR">{price}</span>'
        f'<span class="stock">{stock}</span>'
        f'<span class="in-stock">{"yes" if facts["in_stock"] else "no"}</span>'
        f'<time class="released" datetime="{facts["released"].isoformat()}">{facts["released"].isoformat()}</time>'
        f'<img class="photo" src="{facts["image"]}" alt="photo">'
        f'<ul class="tags">{tags}</ul><ul class="ratings">{ratings}</ul>{description}'
        "</article>"
    )


def page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)} | Demo Shop</title>"
        '<link rel="stylesheet" href="/static/site.css">'
        '<link rel="preload" href="/static/font.woff2" as="font" type="font/woff2" crossorigin>'
        '</head><body><nav><a href="/">Home</a> <a href="/shop">Shop</a></nav>'
        f"<main>{body}</main><footer>Demo Shop for Harvester</footer></body></html>"
    )


# -- hostile pages: what the config layer, URL rules and extraction must survive -------------------------
NESTED_DEPTH = 2000  # libxml2 keeps about this many nested elements; each holds its share of the text


def nested_matches_page(size_bytes: int = 2 << 20) -> str:
    """``size_bytes`` of ``<span class="v">`` nested inside each other: every match holds the text of all
    the matches inside it, so taking each one's text costs the page size times the depth."""
    words = size_bytes // NESTED_DEPTH // 5 + 1
    opening = '<span class="v">' + "word " * words
    return page("Nested", opening * NESTED_DEPTH + "</span>" * NESTED_DEPTH)


def non_canonical_links_page(port: int) -> str:
    """One product spelled eight ways, a link that makes a backtracking follow pattern run for ever,
    one longer than any URL cap, and links with credentials."""
    spellings = [
        "/product/7", "/product/./7", "/shop/../product/7", "/product/7#reviews", "/product/7?utm_source=mail",
        f"HTTP://127.0.0.1:{port}/product/7", f"http://user:secret@127.0.0.1:{port}/product/7",
        "/product/7?fbclid=abc&gclid=def",
    ]
    links = "".join(f'<a class="product-link" href="{html.escape(href)}">7</a>' for href in spellings)
    links += '<a class="product-link" href="/product/8?q=caf%E9">8</a>'
    links += f'<a class="product-link" href="/product/{"a" * 26}!">backtracking bait</a>'
    links += f'<a class="product-link" href="/product/9?{"x" * 5000}">too long</a>'
    return page("Non-canonical links", links)


def hostile_values_body(product_id: int) -> str:
    """A product whose stock does not fit in 64 bits, with a price written the European way."""
    facts = product_facts(product_id)
    return (f'<div class="product"><h1 class="title">{html.escape(facts["title"])}</h1>'
            f'<span class="sku">{facts["sku"]}</span><span class="price">1.234,56 €</span>'
            '<span class="stock">12345678901234567891</span>'
            '<span class="exact">1234567890123456789</span></div>')


# -- routes ------------------------------------------------------------------------------------------
def create_app(site: DemoSite | None = None) -> ASGIApp:
    site = site or DemoSite()

    async def latency(product_id: int | None = None) -> None:
        delay = site.latency_ms
        if product_id is not None and site.slow_every and product_id % site.slow_every == 0:
            delay = site.slow_ms
        if delay > 0:
            await asyncio.sleep(delay / 1000)

    def int_param(request: Request, name: str, default: int) -> int:
        try:
            return int(request.query_params.get(name, default))
        except ValueError:
            return default

    async def index(request: Request) -> HTMLResponse:
        faults = ["/slow/1?delay=2", "/status/500", "/flaky/demo?fail=2", "/ratelimited/demo?retry_after=2",
                  "/redirect-loop/a", "/redirect/3", "/huge?mb=8", "/malformed", "/wrong-type/1",
                  "/js/product/1", "/data.json", "/blocked", "/links", *HOSTILE_FETCH_PAGES]
        items = "".join(f'<li><a href="{url}">{html.escape(url)}</a></li>' for url in faults)
        return HTMLResponse(page("Home", f'<a class="shop" href="/shop">Shop</a><ul class="faults">{items}</ul>'))

    async def shop(request: Request) -> HTMLResponse:
        number = max(1, int_param(request, "page", 1))
        per_page = max(1, min(1000, int_param(request, "per_page", site.per_page)))
        first = (number - 1) * per_page + 1
        last = min(site.products, first + per_page - 1)
        await latency()
        links = []
        for product_id in range(first, last + 1):
            links.append(
                f'<li class="item"><a class="product-link" href="/product/{product_id}?utm_source=listing'
                f'&utm_medium=web#reviews">{html.escape(product_facts(product_id)["title"])}</a>'
                f' <a class="more" href="/product/{product_id}">more</a></li>'
            )
        noise = ('<a class="product-link" href="javascript:void(0)">js</a>'
                 '<a class="product-link" href="mailto:shop@example.com">mail</a>'
                 '<a class="product-link" href="file:///etc/passwd">file</a>'
                 '<a class="product-link" href="https://elsewhere.example.org/product/1">elsewhere</a>')
        pagination = ""
        if last < site.products:
            pagination = f'<a class="next" rel="next" href="/shop?page={number + 1}&amp;per_page={per_page}">Next</a>'
        if number > 1:
            pagination = (f'<a class="prev" href="/shop?page={number - 1}&amp;per_page={per_page}">Prev</a>'
                          + pagination)
        body = f'<ul class="products">{"".join(links)}</ul>{noise}<div class="pagination">{pagination}</div>'
        return HTMLResponse(page(f"Shop page {number}", body))

    async def product(request: Request) -> Response:
        product_id = int(request.path_params["product_id"])
        if not 1 <= product_id <= site.products:
            return HTMLResponse(page("Not found", "<h1>No such product</h1>"), status_code=404)
        await latency(product_id)
        return HTMLResponse(page(product_facts(product_id)["title"], site.restyle(product_body(product_id))))

    async def slow(request: Request) -> HTMLResponse:
        product_id = int(request.path_params["product_id"])
        await asyncio.sleep(float(request.query_params.get("delay", "2")))
        return HTMLResponse(page("Slow", product_body(product_id)))

    async def status(request: Request) -> HTMLResponse:
        code = int(request.path_params["code"])
        return HTMLResponse(page(f"Status {code}", f"<h1>Status {code}</h1>"), status_code=code)

    async def flaky(request: Request) -> HTMLResponse:
        token = request.path_params["token"]
        site.token_hits[f"flaky:{token}"] += 1
        if site.token_hits[f"flaky:{token}"] <= int_param(request, "fail", 1):
            return HTMLResponse(page("Oops", "<h1>Internal error</h1>"), status_code=500)
        return HTMLResponse(page("Recovered", product_body(1)))

    async def ratelimited(request: Request) -> HTMLResponse:
        token = request.path_params["token"]
        site.token_hits[f"429:{token}"] += 1
        if site.token_hits[f"429:{token}"] <= int_param(request, "times", 1):
            return HTMLResponse(page("Slow down", "<h1>Too many requests</h1>"), status_code=429,
                                headers={"Retry-After": request.query_params.get("retry_after", "2")})
        return HTMLResponse(page("Welcome back", product_body(2)))

    async def redirect_loop(request: Request) -> RedirectResponse:
        other = "b" if request.path_params["step"] == "a" else "a"
        return RedirectResponse(f"/redirect-loop/{other}", status_code=302)

    async def redirect_chain(request: Request) -> RedirectResponse:
        remaining = int(request.path_params["count"])
        target = f"/redirect/{remaining - 1}" if remaining > 1 else "/product/3"
        return RedirectResponse(target, status_code=301)

    async def huge(request: Request) -> StreamingResponse:
        megabytes = float(request.query_params.get("mb", "8"))
        chunk = ("<p>" + "lorem ipsum dolor sit amet " * 36 + "</p>\n").encode()

        async def body() -> Any:
            yield page("Huge", product_body(4)).replace("</main>", "").encode()
            sent = 0
            while sent < megabytes * 1024 * 1024:
                yield chunk
                sent += len(chunk)
            yield b"</main></body></html>"

        return StreamingResponse(body(), media_type="text/html; charset=utf-8")

    async def malformed(request: Request) -> HTMLResponse:
        facts = product_facts(5)
        text = ("<html><head><title>Broken</title><body><div class=product><h1 class=title>"
                f"{facts['title']}<span class=sku>{facts['sku']}</span><span class=price>€ {facts['price']}</span>"
                "<p><b><i>unclosed <table><tr><td>cell</div></b></i><ul class=tags><li class=tag>broken"
                "<li class=tag>html</ul><a href='/product/6'>six</a> &bogus; <<<>>")
        return HTMLResponse(text)

    async def wrong_type(request: Request) -> HTMLResponse:
        product_id = int(request.path_params["product_id"])
        return HTMLResponse(page("Wrong types", product_body(product_id, price_text="N/A", stock_text="lots")))

    async def js_product(request: Request) -> HTMLResponse:
        product_id = int(request.path_params["product_id"])
        payload = json.dumps(product_body(product_id))
        body = ('<div id="app" class="loading">Loading…</div>'
                f"<script>window.addEventListener('DOMContentLoaded', function () {{"
                f"var app = document.getElementById('app'); app.className = 'ready'; app.innerHTML = {payload};"
                "});</script>")
        return HTMLResponse(page("Rendered by JavaScript", body))

    async def data_json(request: Request) -> JSONResponse:
        return JSONResponse({"products": [product_facts(1)["sku"]]})

    async def blocked(request: Request) -> HTMLResponse:
        return HTMLResponse(page("Access denied", '<div class="captcha">Please verify you are a human</div>'),
                            status_code=403)

    async def links(request: Request) -> HTMLResponse:
        body = ('<a class="l" href="/product/1?b=2&amp;a=1&amp;utm_campaign=x#top">p1</a>'
                '<a class="l" href="HTTP://127.0.0.1:{port}/product/2">p2</a>'
                '<a class="l" href="../product/3">p3</a>'
                '<a class="l" href="javascript:alert(1)">js</a><a class="l" href="mailto:a@b.c">mail</a>'
                '<a class="l" href="file:///etc/passwd">file</a><a class="l" href="ftp://x.example/y">ftp</a>'
                '<a class="l" href="">empty</a><a class="l">none</a>')
        port = request.url.port or 80
        return HTMLResponse(page("Links", body.replace("{port}", str(port))))

    async def hostile_nested(request: Request) -> HTMLResponse:
        return HTMLResponse(nested_matches_page(min(int_param(request, "bytes", 2 << 20), 16 << 20)))

    async def hostile_links(request: Request) -> HTMLResponse:
        return HTMLResponse(non_canonical_links_page(request.url.port or 80))

    async def hostile_values(request: Request) -> HTMLResponse:
        return HTMLResponse(page("Hostile values", hostile_values_body(int(request.path_params["product_id"]))))

    # Assets as a shop serves them (harvester_demo.assets), cacheable for an hour: a long-lived page
    # downloads the font, the stylesheet and the texture once and each product's photo once.
    cached = {"Cache-Control": "public, max-age=3600"}

    async def image(request: Request) -> Response:
        photo = await asyncio.to_thread(assets.product_photo, int(request.path_params["image_id"]))
        return Response(photo, media_type="image/png", headers=cached)

    async def texture(request: Request) -> Response:
        return Response(assets.background_texture(), media_type="image/png", headers=cached)

    async def font(request: Request) -> Response:
        return Response(assets.web_font(), media_type="font/woff2", headers=cached)

    async def stylesheet(request: Request) -> Response:
        return Response(assets.stylesheet(), media_type="text/css", headers=cached)

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(site.stats())

    async def requests_of(request: Request) -> JSONResponse:
        """Every recorded request start of one client, and how often each path was fetched."""
        counter = site.clients.get(request.path_params["client"])
        if counter is None:
            return JSONResponse({"starts": [], "paths": {}, "max_concurrent": 0, "current": 0, "total": 0})
        return JSONResponse({"starts": counter.starts, "paths": dict(counter.paths),
                             "max_concurrent": counter.max_concurrent, "current": counter.current,
                             "total": counter.total})

    async def reset(request: Request) -> JSONResponse:
        site.reset()
        return JSONResponse({"reset": True})

    async def markup(request: Request) -> JSONResponse:
        """POST /_markup?price=cost renames class "price" on product pages (the site changed its format);
        POST /_markup with no parameters restores the original markup."""
        site.class_renames = dict(request.query_params)
        return JSONResponse({"class_renames": site.class_renames})

    routes = [
        Route("/", index),
        Route("/shop", shop),
        Route("/product/{product_id:int}", product),
        Route("/slow/{product_id:int}", slow),
        Route("/status/{code:int}", status),
        Route("/flaky/{token}", flaky),
        Route("/ratelimited/{token}", ratelimited),
        Route("/redirect-loop/{step}", redirect_loop),
        Route("/redirect/{count:int}", redirect_chain),
        Route("/huge", huge),
        Route("/malformed", malformed),
        Route("/wrong-type/{product_id:int}", wrong_type),
        Route("/js/product/{product_id:int}", js_product),
        Route("/data.json", data_json),
        Route("/blocked", blocked),
        Route("/links", links),
        Route("/hostile/nested", hostile_nested),
        Route("/hostile/links", hostile_links),
        Route("/hostile/values/{product_id:int}", hostile_values),
        Route("/static/img/{image_id:int}.png", image),
        Route("/static/img/texture.png", texture),
        Route("/static/font.woff2", font),
        Route("/static/site.css", stylesheet),
        Route(STATS_PATH, stats),
        Route(f"{STATS_PATH}/reset", reset, methods=["POST"]),
        Route("/_markup", markup, methods=["POST"]),
        Route(STATS_PATH + "/requests/{client}", requests_of),
    ]
    from harvester_demo.hostile import hostile_fetch_routes

    routes += hostile_fetch_routes(product_body, page)
    from harvester_demo.structured import structured_routes  # pages that publish their data

    routes += structured_routes(lambda: site.products, product_facts, page, latency)
    from harvester_demo.browser_shapes import browser_shape_routes  # pages that render late, scroll...

    routes += browser_shape_routes(product_body, page, product_facts, site.products)
    from harvester_demo.incremental import incremental_routes  # sitemaps, conditional requests

    routes += incremental_routes(lambda: site.products, product_body, page, product_facts, latency)
    from harvester_demo.lifecycle import lifecycle_routes  # items delisted and relisted, moved by redirects

    routes += lifecycle_routes(product_body, page, product_facts)
    from harvester_demo.challenges import ChallengeMiddleware, ChallengeWall, challenge_routes  # a WAF (blocks)

    wall = ChallengeWall()
    routes += challenge_routes(wall)
    from harvester_demo.legacy import legacy_routes  # session ids in links, pages that name no charset

    routes += legacy_routes(page)
    from harvester_demo.api_requests import api_request_routes  # APIs behind POST: GraphQL, search

    routes += api_request_routes(lambda: site.products, product_facts, latency)
    app = Starlette(routes=routes)
    app.state.site = site
    return ConcurrencyCounter(ChallengeMiddleware(app, wall), site)
