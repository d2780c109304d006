"""The demo site's pages for incremental harvests: sitemaps, conditional requests, changes.

- ``/inc/sitemap.xml?products=N&per_file=M``: a sitemap index whose children are gzip files
  (``/inc/sitemaps/products-<k>.xml.gz``), each listing ``/inc/product/<id>`` (``&all=1``:
  ``/inc/all/product/<id>``) with its ``<lastmod>``;
  ``/inc/sitemap-plain.xml`` lists the same products in one uncompressed ``<urlset>``.
- ``/inc/product/<id>``: the product page with ``ETag`` and ``Last-Modified``. Most honour
  If-None-Match / If-Modified-Since (304, no body); ids ending in 5 send validators but ignore them
  (always 200), ids ending in 0 send none; ``/inc/all/product/<id>`` honours them on every page.
- ``POST /_inc/price?product=<id>&price=<amount>`` changes a product's price (its ETag, Last-Modified and
  sitemap lastmod change with it); ``POST /_inc/reset`` forgets every change and count.
- ``GET /_inc/stats``: per client (``X-Demo-Client``), responses by status and body bytes sent by these pages.
- Hostile sitemaps: ``/inc/hostile/huge.xml?mb=50`` (50 MB of entries), ``/inc/hostile/self-index.xml`` (an
  index that lists itself and a child that lists it back), ``/inc/hostile/bomb.xml`` (billion laughs),
  ``/inc/hostile/gzip-bomb.xml.gz`` (a gzip file that inflates to 1 GiB), ``/inc/hostile/deep/<n>.xml``
  (indexes nested for ever).
"""

from __future__ import annotations

import gzip
import hashlib
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from html import escape
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harvester_demo.hostile import gzipped_filler

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)  # every product was last modified then, until changed
CLIENT_HEADER = "x-demo-client"
INCREMENTAL_PAGES = ["/inc/sitemap.xml", "/inc/product/1", "/inc/hostile/self-index.xml", "/inc/hostile/bomb.xml"]


@dataclass
class IncrementalState:
    """Price changes (product -> (price, when)) and what each client was served."""

    prices: dict[int, tuple[float, datetime]] = field(default_factory=dict)
    statuses: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    body_bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def reset(self) -> None:
        self.prices.clear()
        self.statuses.clear()
        self.body_bytes.clear()

    def modified_at(self, product_id: int) -> datetime:
        return self.prices[product_id][1] if product_id in self.prices else BASE_TIME

    def served(self, request: Request, response: Response) -> Response:
        client = request.headers.get(CLIENT_HEADER) or (request.client.host if request.client else "unknown")
        self.statuses[client][str(response.status_code)] += 1
        self.body_bytes[client] += len(response.body) if hasattr(response, "body") else 0
        return response


def _lastmod(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def urlset(entries: list[tuple[str, datetime | None]]) -> bytes:
    items = "".join(f"<url><loc>{escape(url)}</loc>" + (f"<lastmod>{_lastmod(when)}</lastmod>" if when else "")
                    + "</url>" for url, when in entries)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{SITEMAP_NS}">{items}</urlset>'.encode()


def sitemap_index(entries: list[tuple[str, datetime | None]]) -> bytes:
    items = "".join(f"<sitemap><loc>{escape(url)}</loc>" + (f"<lastmod>{_lastmod(when)}</lastmod>" if when else "")
                    + "</sitemap>" for url, when in entries)
    return f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex xmlns="{SITEMAP_NS}">{items}</sitemapindex>'.encode()


def gzip_bomb(megabytes: int) -> bytes:
    """A gzip FILE (not a content encoding) of a sitemap that never ends: ``megabytes`` MiB of spaces, built once."""
    return gzipped_filler(f'<urlset xmlns="{SITEMAP_NS}"><url><loc>'.encode(), b" ", megabytes)


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{n} "{("&lol" + (str(n - 1) if n > 1 else "") + ";") * 10}">' for n in range(1, 10))
    + f']><urlset xmlns="{SITEMAP_NS}"><url><loc>http://example.org/&lol9;</loc></url></urlset>'
)


def incremental_routes(products: Callable[[], int], product_body: Callable[..., str], page: Callable[[str, str], str],
                       product_facts: Callable[[int], dict[str, Any]],
                       latency: Callable[..., Awaitable[None]]) -> list[Route]:
    """The routes, built with the app's own product helpers; the state is this module's."""
    state = IncrementalState()

    def int_param(request: Request, name: str, default: int, low: int = 1, high: int = 1_000_000) -> int:
        try:
            return max(low, min(high, int(request.query_params.get(name, default))))
        except ValueError:
            return default

    def base(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    def price_of(product_id: int) -> float:
        return state.prices[product_id][0] if product_id in state.prices else product_facts(product_id)["price"]

    async def sitemap(request: Request) -> Response:
        count = int_param(request, "products", products())
        per_file = int_param(request, "per_file", 200)
        files = (count + per_file - 1) // per_file
        children = []
        for number in range(files):
            ids = range(number * per_file + 1, min(count, (number + 1) * per_file) + 1)
            newest = max(state.modified_at(product_id) for product_id in ids)
            every = "&all=1" if request.query_params.get("all") else ""  # list /inc/all/ pages
            children.append((f"{base(request)}/inc/sitemaps/products-{number}.xml.gz?products={count}"
                             f"&per_file={per_file}{every}", newest))
        return state.served(request, Response(sitemap_index(children), media_type="application/xml"))

    async def sitemap_file(request: Request) -> Response:
        count = int_param(request, "products", products())
        per_file = int_param(request, "per_file", 200)
        number = int(request.path_params["number"])
        ids = range(number * per_file + 1, min(count, (number + 1) * per_file) + 1)
        pages = "/inc/all/product" if request.query_params.get("all") else "/inc/product"
        body = urlset([(f"{base(request)}{pages}/{product_id}", state.modified_at(product_id))
                       for product_id in ids])
        return state.served(request, Response(gzip.compress(body, compresslevel=6), media_type="application/gzip"))

    async def sitemap_plain(request: Request) -> Response:
        count = int_param(request, "products", products())
        body = urlset([(f"{base(request)}/inc/product/{product_id}", state.modified_at(product_id))
                       for product_id in range(1, count + 1)])
        return state.served(request, Response(body, media_type="application/xml"))

    async def product(request: Request) -> Response:
        product_id = int(request.path_params["product_id"])
        if not 1 <= product_id <= 1_000_000:  # any id: a sitemap may list more products than the shop shows
            return state.served(request, HTMLResponse(page("Not found", "<h1>No such product</h1>"), status_code=404))
        await latency()
        facts = product_facts(product_id)
        body = page(facts["title"], product_body(product_id, facts, price_text=f"€ {price_of(product_id):,.2f}"))
        modified = state.modified_at(product_id)
        etag = '"' + hashlib.blake2b(body.encode(), digest_size=8).hexdigest() + '"'
        headers = {"ETag": etag, "Last-Modified": format_datetime(modified, usegmt=True)}
        every_page = request.url.path.startswith("/inc/all/")  # a site whose every page honours them
        if product_id % 10 == 0 and not every_page:  # this page sends no validators
            headers = {}
        if (every_page or product_id % 10 not in (0, 5)) and _not_modified(request, etag, modified):
            return state.served(request, Response(status_code=304, headers=headers))
        return state.served(request, HTMLResponse(body, headers=headers))

    async def change_price(request: Request) -> JSONResponse:
        product_id = int_param(request, "product", 1)
        price = float(request.query_params.get("price", "1"))
        # lastmod and Last-Modified have whole seconds: the next one, so a page harvested in this second
        # is older than its change
        changed = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        state.prices[product_id] = (price, changed)
        return JSONResponse({"product": product_id, "price": price})

    async def reset(request: Request) -> JSONResponse:
        state.reset()
        return JSONResponse({"reset": True})

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse({client: {"statuses": dict(statuses), "body_bytes": state.body_bytes[client]}
                             for client, statuses in state.statuses.items()})

    # -- hostile sitemaps ----------------------------------------------------------------------------
    async def huge(request: Request) -> StreamingResponse:
        megabytes = int_param(request, "mb", 50, 1, 200)
        entry = f"<url><loc>{base(request)}/inc/product/".encode()

        async def body() -> AsyncIterator[bytes]:
            yield f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{SITEMAP_NS}">'.encode()
            sent, number = 0, 0
            while sent < megabytes * 1024 * 1024:
                chunk = b"".join(entry + str(number + offset).encode() + b"</loc></url>" for offset in range(1, 2001))
                number += 2000
                sent += len(chunk)
                yield chunk
            yield b"</urlset>"

        return StreamingResponse(body(), media_type="application/xml")

    async def self_index(request: Request) -> Response:
        here = f"{base(request)}/inc/hostile/self-index.xml"
        return state.served(request, Response(sitemap_index([(here, None), (f"{base(request)}/inc/hostile/child.xml",
                                                                             None)]), media_type="application/xml"))

    async def child_index(request: Request) -> Response:
        parent = f"{base(request)}/inc/hostile/self-index.xml"
        return state.served(request, Response(sitemap_index([(parent, None)]), media_type="application/xml"))

    async def bomb(request: Request) -> Response:
        return state.served(request, Response(BILLION_LAUGHS.encode(), media_type="application/xml"))

    async def gzip_bomb_file(request: Request) -> Response:
        # off the event loop (zlib releases the GIL): 1 GiB at level 9 is seconds of CPU, during which every
        # other page of the site, the other sitemaps of the same run included, would wait
        body = await run_in_threadpool(gzip_bomb, int_param(request, "mb", 1024, 1, 4096))
        return Response(body, media_type="application/gzip")

    async def deep(request: Request) -> Response:
        level = int(request.path_params["level"])
        return state.served(request, Response(sitemap_index([(f"{base(request)}/inc/hostile/deep/{level + 1}.xml",
                                                              None)]), media_type="application/xml"))

    return [
        Route("/inc/sitemap.xml", sitemap),
        Route("/inc/sitemap-plain.xml", sitemap_plain),
        Route("/inc/sitemaps/products-{number:int}.xml.gz", sitemap_file),
        Route("/inc/product/{product_id:int}", product),
        Route("/inc/all/product/{product_id:int}", product),
        Route("/inc/hostile/huge.xml", huge),
        Route("/inc/hostile/self-index.xml", self_index),
        Route("/inc/hostile/child.xml", child_index),
        Route("/inc/hostile/bomb.xml", bomb),
        Route("/inc/hostile/gzip-bomb.xml.gz", gzip_bomb_file),
        Route("/inc/hostile/deep/{level:int}.xml", deep),
        Route("/_inc/price", change_price, methods=["POST"]),
        Route("/_inc/reset", reset, methods=["POST"]),
        Route("/_inc/stats", stats),
    ]


def _not_modified(request: Request, etag: str, modified: datetime) -> bool:
    """RFC 9110: If-None-Match decides when present; else If-Modified-Since (second precision)."""
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None:
        return etag in [tag.strip() for tag in if_none_match.split(",")] or if_none_match.strip() == "*"
    since = request.headers.get("if-modified-since")
    if since:
        try:
            return modified.replace(microsecond=0) <= parsedate_to_datetime(since)
        except (TypeError, ValueError):
            return False
    return False
