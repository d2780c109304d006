"""The demo site's hostile pages for the fetch side: what a site we do not control can send.

Each page is one case the fetcher must turn into a per-page outcome with its reason (docs/workers.md,
"Fetch-side defences"): decompression bombs, stacked and corrupt encodings, absurd Retry-After values,
redirects to loopback, cloud metadata and ``file://``, a page whose charset only its ``<meta>`` names,
links to private addresses, a robots.txt with Disallow and Crawl-delay, and a basic-auth page.
"""

from __future__ import annotations

import base64
import gzip
import html
import secrets
import threading
import zlib
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

BASIC_AUTH_USER = "demo"
BASIC_AUTH_PASSWORD = "demo-secret"  # the demo site's own test credential, not a secret of anyone
POLITE_AGENT = "HarvesterPolite"  # the robots.txt group with a Crawl-delay (tests send this User-Agent)
ROBOTS_TXT = f"""# The demo site's robots.txt: /private/ is off limits to everyone; {POLITE_AGENT} must also wait.
User-agent: *
Disallow: /private/

User-agent: {POLITE_AGENT}
Disallow: /private/
Crawl-delay: 1
Request-rate: 2/1s
"""
HOSTILE_FETCH_PAGES = [
    "/hostile/gzip-bomb?mb=2048&layers=2", "/hostile/gzip-bomb?mb=64&layers=1", "/hostile/double-gzip",
    "/hostile/corrupt-gzip", "/hostile/retry-after?value=99999999999", "/hostile/retry-after?value=huge",
    "/hostile/redirect?to=http://127.0.0.1:6379/", "/hostile/redirect?to=http://169.254.169.254/latest/meta-data/",
    "/hostile/redirect?to=file:///etc/passwd", "/hostile/meta-charset", "/hostile/private-links", "/private/1",
    "/auth/basic/1", "/robots.txt",
]


# One lock a bomb: its two first requests build it once, and one bomb being built never holds up another's request.
_BUILDS: dict[tuple[bytes, bytes, int, int], threading.Lock] = {}
_BUILDS_LOCK = threading.Lock()
DEFAULT_BOMBS = ((2048, 2), (64, 1))  # what HOSTILE_PATHS ask for


def gzipped_filler(prefix: bytes, filler: bytes, megabytes: int, layers: int = 1) -> bytes:
    """``prefix``, then ``megabytes`` MiB of the byte ``filler``, gzipped ``layers`` times: a body that inflates far
    beyond its size (the HTML bombs here, the sitemap bomb of :mod:`harvester_demo.incremental`). Built once per
    argument (1-2 GiB at level 9 is seconds of CPU: callers run it off the event loop)."""
    key = (prefix, filler, megabytes, layers)
    with _BUILDS_LOCK:
        lock = _BUILDS.setdefault(key, threading.Lock())
    with lock:
        return _gzipped_filler(*key)


@lru_cache(maxsize=6)
def _gzipped_filler(prefix: bytes, filler: bytes, megabytes: int, layers: int) -> bytes:
    """Built in 1 MiB steps (never held whole before it is compressed)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = filler * (1024 * 1024)
    parts = [compressor.compress(prefix)]
    parts += [compressor.compress(block) for _ in range(megabytes)]
    parts.append(compressor.flush())
    body = b"".join(parts)
    for _ in range(layers - 1):
        body = gzip.compress(body, compresslevel=9)
    return body


def zeros_gzipped(megabytes: int, layers: int) -> bytes:
    """An HTML page of ``megabytes`` MiB of zeros gzipped ``layers`` times (a Content-Encoding bomb)."""
    return gzipped_filler(b"<html><body><p>", b"\0", megabytes, layers)


def prepare_bombs() -> threading.Thread:
    """Build the default bombs in the background as the site starts, so their first request is served at once."""
    thread = threading.Thread(target=lambda: [zeros_gzipped(*bomb) for bomb in DEFAULT_BOMBS],
                              name="gzip-bombs", daemon=True)
    thread.start()
    return thread


def hostile_fetch_routes(product_body: Callable[..., str], page: Callable[[str, str], str]) -> list[Route]:
    """The routes, built with the app's own page helpers."""

    def int_param(request: Request, name: str, default: int) -> int:
        try:
            return int(request.query_params.get(name, default))
        except ValueError:
            return default

    async def robots(request: Request) -> PlainTextResponse:
        return PlainTextResponse(ROBOTS_TXT + f"\nSitemap: {str(request.base_url).rstrip('/')}/inc/sitemap.xml\n")

    async def private(request: Request) -> HTMLResponse:
        return HTMLResponse(page("Private", product_body(int(request.path_params["product_id"]))))

    async def gzip_bomb(request: Request) -> Response:
        megabytes = max(1, min(4096, int_param(request, "mb", 2048)))
        layers = max(1, min(3, int_param(request, "layers", 2)))
        # off the event loop (zlib releases the GIL): building a bomb must not stall every other page
        body = await run_in_threadpool(zeros_gzipped, megabytes, layers)
        return Response(body, media_type="text/html",
                        headers={"Content-Encoding": ", ".join(["gzip"] * layers)})

    async def double_gzip(request: Request) -> Response:
        body = gzip.compress(gzip.compress(page("Double", product_body(7)).encode()))
        return Response(body, media_type="text/html", headers={"Content-Encoding": "gzip, gzip"})

    async def corrupt_gzip(request: Request) -> Response:
        body = gzip.compress(page("Corrupt", product_body(8)).encode())
        body = body[:10] + bytes(byte ^ 0x5A for byte in body[10:60]) + body[60:]
        return Response(body, media_type="text/html", headers={"Content-Encoding": "gzip"})

    async def retry_after(request: Request) -> HTMLResponse:
        value = request.query_params.get("value", "99999999999")
        if value == "huge":
            value = "9" * 400
        return HTMLResponse(page("Slow down", "<h1>Too many requests</h1>"), status_code=429,
                            headers={"Retry-After": value})

    async def redirect(request: Request) -> RedirectResponse:
        return RedirectResponse(request.query_params.get("to", "http://127.0.0.1:6379/"), status_code=302)

    async def meta_charset(request: Request) -> Response:
        text = ('<!doctype html><html><head><meta charset="windows-1252"><title>Caf\u00e9</title></head><body>'
                '<main class="product"><h1 class="title">Caf\u00e9 cr\u00e8me \u201cspecial\u201d</h1>'
                '<span class="sku">SKU-CAFE</span><span class="price">\u20ac 3.50</span></main></body></html>')
        # no charset in the header (Starlette would add one to a media_type): only <meta> says cp1252
        return Response(text.encode("cp1252"), headers={"Content-Type": "text/html"})

    async def private_links(request: Request) -> HTMLResponse:
        port = request.url.port or 80
        targets = [
            f"http://127.0.0.1:{port}/product/1", f"http://127.0.0.2:{port}/product/2",
            "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/product/3", "http://[::1]/product/4",
            f"http://user:secret@127.0.0.1:{port}/product/5", "http://224.0.0.1/product/6", "http://0.0.0.0/product/7",
            f"http://127.0.0.1:{port}/private/8",
        ]
        body = "".join(f'<a class="l" href="{html.escape(url)}">{html.escape(url)}</a>' for url in targets)
        return HTMLResponse(page("Private links", body))

    async def basic_auth(request: Request) -> Response:
        expected = base64.b64encode(f"{BASIC_AUTH_USER}:{BASIC_AUTH_PASSWORD}".encode()).decode()
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Basic {expected}".encode()):
            return HTMLResponse(page("Login", "<h1>Log in first</h1>"), status_code=401,
                                headers={"WWW-Authenticate": 'Basic realm="demo"'})
        return HTMLResponse(page("Members only", product_body(int(request.path_params["product_id"]))))

    routes: list[Any] = [
        Route("/robots.txt", robots),
        Route("/private/{product_id:int}", private),
        Route("/hostile/gzip-bomb", gzip_bomb),
        Route("/hostile/double-gzip", double_gzip),
        Route("/hostile/corrupt-gzip", corrupt_gzip),
        Route("/hostile/retry-after", retry_after),
        Route("/hostile/redirect", redirect),
        Route("/hostile/meta-charset", meta_charset),
        Route("/hostile/private-links", private_links),
        Route("/auth/basic/{product_id:int}", basic_auth),
    ]
    return routes
