"""The demo site's JavaScript shapes: pages a browser source meets on real shops.

Each shape is one thing a page slot must handle before it extracts (docs/sources.md, "The browser section"):

- ``/late/timer/<id>``: the product is written by a timer 50-500 ms after ``load`` (:func:`late_delay_ms`);
- ``/late/xhr/<id>``: the product comes from the page's own XHR (``/late/api/product/<id>``), answered 50-500 ms
  later; ``?delay_ms=`` overrides either delay, ``?never=1`` never renders the price;
- ``/scroll/listing``: an infinite-scroll listing (``items`` products, ``batch`` more on each scroll to the
  bottom, fetched from ``/listing/api/items``);
- ``/load-more/listing``: the same with a "Load more" button, removed once every item is shown;
- ``/consent/product/<id>``: a consent overlay covers the page; the price is shown only once accepted;
- ``/cookie/set`` sets a cookie (header) and a localStorage entry; ``/cookie/show`` shows what the
  browser sends and holds (a source visiting after another must see nothing of it);
- ``/guard/...``: pages that try to reach what the address guard refuses: a popup, a WebSocket, an image,
  a ``fetch`` and a service worker, each to the URL in ``?to=``; each page is an ordinary product otherwise.

Product pages have the demo's product markup (``h1.title``, ``span.sku``, ``span.price``), so the same
source attributes read every shape.
"""

from __future__ import annotations

import asyncio
import html
import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

LATE_MIN_MS, LATE_SPREAD_MS = 50, 451  # delays 50..500 ms


def late_delay_ms(product_id: int) -> int:
    """How long after ``load`` product ``product_id``'s late page shows its content (50-500 ms, fixed per id)."""
    return LATE_MIN_MS + (product_id * 7919) % LATE_SPREAD_MS


def _script(code: str) -> str:
    return f"<script>{code}</script>"


def int_param(request: Request, name: str, default: int, low: int = 0, high: int = 100_000) -> int:
    try:
        return max(low, min(high, int(request.query_params.get(name, default))))
    except ValueError:
        return default


def item_html(item: dict[str, Any]) -> str:
    return (f'<li class="item" style="height:240px"><a class="product-link" href="/product/{item["id"]}">'
            f'{html.escape(item["title"])}</a></li>')


# one function shared by both listings: append a batch fetched from /listing/api/items
APPEND_BATCH = ("function appendBatch(done) { if (window.loading) return; window.loading = true;"
                "var list = document.getElementById('items'); var shown = list.children.length;"
                "fetch('/listing/api/items?offset=' + shown + '&limit=' + BATCH + '&items=' + ITEMS)"
                ".then(function (r) { return r.json(); }).then(function (data) {"
                "data.items.forEach(function (item) { var li = document.createElement('li');"
                "li.className = 'item'; li.style.height = '240px'; var a = document.createElement('a');"
                "a.className = 'product-link'; a.href = '/product/' + item.id; a.textContent = item.title;"
                "li.appendChild(a); list.appendChild(li); });"
                "window.loading = false; if (done) done(list.children.length >= ITEMS); }); }")


class BrowserShapes:
    """The shapes' handlers, built with the app's own page helpers."""

    def __init__(self, product_body: Callable[..., str], page: Callable[[str, str], str],
                 product_facts: Callable[[int], dict[str, Any]], products: int = 500) -> None:
        self.product_body, self.page, self.product_facts, self.products = product_body, page, product_facts, products

    def delay_of(self, request: Request, product_id: int) -> int:
        return int_param(request, "delay_ms", late_delay_ms(product_id), 0, 60_000)

    def rendered(self, request: Request, product_id: int) -> str:
        """The product's markup, without its price when the page is asked never to show one (``?never=1``)."""
        if request.query_params.get("never"):
            return self.without_price(product_id)
        return self.product_body(product_id)

    def without_price(self, product_id: int) -> str:
        """The product as first rendered when its price comes later (or never)."""
        body = self.product_body(product_id)
        start = body.index('<span class="price"')
        return body[:start] + body[body.index("</span>", start) + len("</span>"):]

    async def late_timer(self, request: Request) -> HTMLResponse:
        product_id = int(request.path_params["product_id"])
        rendered = self.rendered(request, product_id)
        script = ("window.addEventListener('load', function () { setTimeout(function () {"
                  "var app = document.getElementById('app'); app.className = 'ready';"
                  f"app.innerHTML = {json.dumps(rendered)}; }}, {self.delay_of(request, product_id)}); }});")
        body = '<div id="app" class="loading">Loading…</div>' + _script(script)
        return HTMLResponse(self.page("Rendered late by a timer", body))

    async def late_xhr(self, request: Request) -> HTMLResponse:
        product_id = int(request.path_params["product_id"])
        never = "&never=1" if request.query_params.get("never") else ""
        query = f"?delay_ms={self.delay_of(request, product_id)}{never}"
        script = ("window.addEventListener('load', function () {"
                  f"fetch('/late/api/product/{product_id}{query}').then(function (r) {{ return r.json(); }})"
                  ".then(function (data) { var app = document.getElementById('app'); app.className = 'ready';"
                  "app.innerHTML = data.html; }); });")
        body = '<div id="app" class="loading">Loading…</div>' + _script(script)
        return HTMLResponse(self.page("Rendered from the page's XHR", body))

    async def api_product(self, request: Request) -> JSONResponse:
        product_id = int(request.path_params["product_id"])
        await asyncio.sleep(self.delay_of(request, product_id) / 1000)
        return JSONResponse({"id": product_id, "html": self.rendered(request, product_id)})

    def listing_items(self, offset: int, limit: int, items: int) -> list[dict[str, Any]]:
        last = min(items, offset + limit, self.products)
        return [{"id": n, "title": self.product_facts(n)["title"]} for n in range(offset + 1, last + 1)]

    def listing_page(self, request: Request, title: str, extra_html: str, extra_script: str) -> HTMLResponse:
        items = int_param(request, "items", 45, 1, self.products)
        batch = int_param(request, "batch", 10, 1, 1000)
        first = "".join(item_html(item) for item in self.listing_items(0, batch, items))
        script = f"var ITEMS = {items}, BATCH = {batch};" + APPEND_BATCH + extra_script
        body = f'<h1 class="listing">{html.escape(title)}</h1><ul id="items">{first}</ul>{extra_html}' + _script(script)
        return HTMLResponse(self.page(title, body))

    async def scroll_listing(self, request: Request) -> HTMLResponse:
        script = ("window.addEventListener('scroll', function () {"
                  "if (window.innerHeight + window.scrollY >= document.body.scrollHeight - 100"
                  " && document.getElementById('items').children.length < ITEMS) { appendBatch(); } });")
        return self.listing_page(request, "Infinite scroll", "", script)

    async def load_more_listing(self, request: Request) -> HTMLResponse:
        button = '<button class="load-more" type="button">Load more</button>'
        script = ("document.querySelector('button.load-more').addEventListener('click', function (event) {"
                  "var button = event.target; appendBatch(function (all) { if (all) button.remove(); }); });")
        return self.listing_page(request, "Load more", button, script)

    async def api_listing(self, request: Request) -> JSONResponse:
        await asyncio.sleep(0.05)
        items = self.listing_items(int_param(request, "offset", 0), int_param(request, "limit", 10, 1, 1000),
                                   int_param(request, "items", 45, 1, self.products))
        return JSONResponse({"items": items})

    async def consent_product(self, request: Request) -> HTMLResponse:
        product_id = int(request.path_params["product_id"])
        price = self.product_facts(product_id)["price"]
        overlay = ('<div id="consent" style="position:fixed;inset:0;background:rgba(0,0,0,.85);z-index:10">'
                   '<p>We value your privacy.</p><button class="consent-accept" type="button">Accept all</button>'
                   "</div>")
        script = ("document.querySelector('button.consent-accept').addEventListener('click', function () {"
                  "document.getElementById('consent').remove(); var app = document.querySelector('article.product');"
                  "var price = document.createElement('span'); price.className = 'price';"
                  f"price.textContent = {json.dumps(f'€ {price:,.2f}')}; app.appendChild(price); }});")
        return HTMLResponse(self.page("Consent first", self.without_price(product_id) + overlay + _script(script)))

    async def cookie_set(self, request: Request) -> HTMLResponse:
        value = request.query_params.get("value", "A")[:40]
        quoted = json.dumps(value)
        script = f"localStorage.setItem('visitor', {quoted}); document.cookie = 'js_visitor=' + {quoted} + '; path=/';"
        body = (f'<h1 class="title">Welcome</h1><span class="sku">COOKIE-SET</span>'
                f'<span class="visitor">{html.escape(value)}</span>')
        response = HTMLResponse(self.page("Cookie set", body + _script(script)))
        response.set_cookie("visitor", value, path="/")
        return response

    async def cookie_show(self, request: Request) -> HTMLResponse:
        sent = request.headers.get("cookie") or "none"
        script = ("var held = [document.cookie, localStorage.getItem('visitor') || ''].filter(Boolean).join(' | ');"
                  "document.getElementById('held').textContent = held || 'none';")
        body = (f'<h1 class="title">What the browser carries</h1><span class="sku">COOKIE-SHOW</span>'
                f'<span class="cookie-header">{html.escape(sent)}</span><span class="cookie-js" id="held"></span>')
        return HTMLResponse(self.page("Cookie shown", body + _script(script)))

    def guard_page(self, request: Request, title: str, attack: str) -> HTMLResponse:
        """A product page (id 1) whose script ``attack``s the ``?to=`` URL and writes what happened in #probe.
        An async script held ``hold_ms`` (1000) keeps ``load`` waiting, and #probe is marked ``settled`` only
        at ``load``: a crawler that waits for ``span.probe.settled`` reads the page after the attack had its time."""
        target = request.query_params.get("to", "")
        hold = int_param(request, "hold_ms", 1000, 0, 10_000)
        script = (f"var TO = {json.dumps(target)}; var probe = document.getElementById('probe');"
                  "function report(text) { probe.textContent = text; }"
                  "window.addEventListener('load', function () { probe.classList.add('settled'); });" + attack)
        body = (self.product_body(1) + '<span class="probe" id="probe">pending</span>' + _script(script)
                + f'<script async src="/guard/hold?ms={hold}"></script>')
        return HTMLResponse(self.page(title, body))

    async def hold(self, request: Request) -> Response:
        await asyncio.sleep(int_param(request, "ms", 1000, 0, 10_000) / 1000)
        return Response("/* held */", media_type="text/javascript")

    async def guard_popup(self, request: Request) -> HTMLResponse:
        attack = "var opened = window.open(TO, '_blank'); report(opened ? 'opened' : 'refused');"
        return self.guard_page(request, "Popup", attack)

    async def guard_websocket(self, request: Request) -> HTMLResponse:
        attack = ("try { var socket = new WebSocket(TO); socket.onopen = function () { report('open'); };"
                  "socket.onerror = function () { report('error'); }; socket.onclose = function () {"
                  " if (probe.textContent === 'pending') report('closed'); }; } catch (e) { report('refused: ' + e); }")
        return self.guard_page(request, "WebSocket", attack)

    async def guard_image(self, request: Request) -> HTMLResponse:
        attack = ("var image = new Image(); image.onload = function () { report('loaded'); };"
                  "image.onerror = function () { report('error'); }; image.src = TO; document.body.appendChild(image);")
        return self.guard_page(request, "Image", attack)

    async def guard_fetch(self, request: Request) -> HTMLResponse:
        attack = ("fetch(TO, {mode: 'no-cors'}).then(function () { report('fetched'); })"
                  ".catch(function (e) { report('refused: ' + e); });")
        return self.guard_page(request, "Fetch", attack)

    async def guard_service_worker(self, request: Request) -> HTMLResponse:
        script_url = "/guard/sw.js?to=" + request.query_params.get("to", "")
        attack = ("if (!navigator.serviceWorker) { report('no service workers'); } else {"
                  f"navigator.serviceWorker.register({json.dumps(script_url)}, {{scope: '/guard/'}})"
                  ".then(function () { report('registered'); }).catch(function (e) { report('refused: ' + e); }); }")
        return self.guard_page(request, "Service worker", attack)

    async def guard_service_worker_script(self, request: Request) -> Response:
        target = json.dumps(request.query_params.get("to", ""))
        code = (f"self.addEventListener('install', function (event) {{ event.waitUntil(fetch({target}, "
                "{mode: 'no-cors'}).catch(function () {})); });")
        return Response(code, media_type="text/javascript")

    def routes(self) -> list[Route]:
        return [
            Route("/late/timer/{product_id:int}", self.late_timer),
            Route("/late/xhr/{product_id:int}", self.late_xhr),
            Route("/late/api/product/{product_id:int}", self.api_product),
            Route("/scroll/listing", self.scroll_listing),
            Route("/load-more/listing", self.load_more_listing),
            Route("/listing/api/items", self.api_listing),
            Route("/consent/product/{product_id:int}", self.consent_product),
            Route("/cookie/set", self.cookie_set),
            Route("/cookie/show", self.cookie_show),
            Route("/guard/popup", self.guard_popup),
            Route("/guard/websocket", self.guard_websocket),
            Route("/guard/image", self.guard_image),
            Route("/guard/fetch", self.guard_fetch),
            Route("/guard/service-worker", self.guard_service_worker),
            Route("/guard/sw.js", self.guard_service_worker_script),
            Route("/guard/hold", self.hold),
        ]


def browser_shape_routes(product_body: Callable[..., str], page: Callable[[str, str], str],
                         product_facts: Callable[[int], dict[str, Any]], products: int = 500) -> list[Route]:
    """The routes, built with the app's own page helpers."""
    return BrowserShapes(product_body, page, product_facts, products).routes()
