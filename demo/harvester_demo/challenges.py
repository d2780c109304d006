"""A WAF in front of the demo shop: past N requests of one client within a window, its catalogue pages
(``/shop``, ``/product/…``, ``/life/shop/…``) are answered by a challenge page, as Cloudflare's "Just a
moment..." is, with status 200 (a challenge that looks like a page: extracted, it would give a record of
nulls) or 403.

Off by default. ``POST /_challenge?after=N&window=S&status=200`` turns it on (N requests per S seconds per
client, the client named by the ``X-Demo-Client`` header, else its address); ``POST /_challenge`` turns it off
(the site relents). ``GET /challenge`` shows the challenge page itself.

``&cookie=1`` binds the verdict to a cookie as well, as Cloudflare's ``__cf_bm`` does: a challenge sets
``waf_verdict``, and a request that carries it is challenged from any address, so only a client that comes back
through another address *with fresh cookies* gets through. ``GET /_challenge`` counts what each client address
was served (``served``: pages, ``challenged_by``: challenges).

``&clients=127.0.0.1,127.0.0.2`` puts the wall in front of those client addresses only (a site that bans one
address range, a datacenter's, and lets the others through): the others are served whatever their rate.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

CHALLENGED_PREFIXES = ("/shop", "/product/", "/life/shop/")  # the catalogue, and the shop whose items go away
VERDICT_COOKIE = "waf_verdict"
CHALLENGE_PAGE = (
    '<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>'
    '<meta http-equiv="refresh" content="390"><meta name="robots" content="noindex,nofollow"></head>'
    '<body><div class="main-wrapper" role="main"><div class="main-content"><h1 class="zone-name-title">'
    'shop.example</h1><h2 class="h2">Checking if the site connection is secure</h2><noscript>Enable JavaScript '
    "and cookies to continue</noscript></div></div></body></html>"
)


@dataclass
class ChallengeWall:
    """The wall's knobs and each client's recent request times."""

    after: int = 0  # requests per window a client may make before it is challenged; 0: the wall is off
    window_seconds: float = 60.0
    status: int = 200
    recent: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(deque))
    challenged: int = 0
    cookie: bool = False  # the verdict bound to a cookie as well as to the client
    served: Counter[str] = field(default_factory=Counter)  # catalogue pages answered, by client
    challenged_by: Counter[str] = field(default_factory=Counter)
    clients: frozenset[str] = frozenset()  # the addresses the wall stands before; empty: every client

    def configure(self, after: int, window_seconds: float, status: int, cookie: bool = False,
                  clients: frozenset[str] = frozenset()) -> None:
        self.after, self.window_seconds, self.status, self.cookie = after, window_seconds, status, cookie
        self.clients = clients
        self.recent.clear()
        self.served.clear()
        self.challenged_by.clear()

    def challenges(self, client: str) -> bool:
        """Count this request of ``client``; True when it is past the wall's allowance."""
        if self.after <= 0 or (self.clients and client not in self.clients):
            return False
        now = time.monotonic()
        times = self.recent[client]
        while times and times[0] <= now - self.window_seconds:
            times.popleft()
        times.append(now)
        return len(times) > self.after


class ChallengeMiddleware:
    """Answers catalogue requests past the allowance with the challenge page, before the shop sees them."""

    def __init__(self, app: ASGIApp, wall: ChallengeWall) -> None:
        self.app, self.wall = app, wall

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(CHALLENGED_PREFIXES):
            client = next((value.decode() for name, value in scope["headers"] if name == b"x-demo-client"),
                          scope["client"][0] if scope.get("client") else "unknown")
            cookies = b"; ".join(value for name, value in scope["headers"] if name == b"cookie")
            marked = self.wall.cookie and VERDICT_COOKIE.encode() + b"=" in cookies
            if self.wall.challenges(client) or marked:
                self.wall.challenged += 1
                self.wall.challenged_by[client] += 1
                page = HTMLResponse(CHALLENGE_PAGE, status_code=self.wall.status)
                if self.wall.cookie:
                    page.set_cookie(VERDICT_COOKIE, f"challenged-{client}", path="/")
                await page(scope, receive, send)
                return
            self.wall.served[client] += 1
        await self.app(scope, receive, send)


def challenge_routes(wall: ChallengeWall) -> list[Route]:
    async def control(request: Request) -> JSONResponse:
        try:
            after = int(request.query_params.get("after", "0"))
            window = float(request.query_params.get("window", "60"))
            status = int(request.query_params.get("status", "200"))
            cookie = request.query_params.get("cookie", "0") not in ("0", "")
            clients = frozenset(filter(None, request.query_params.get("clients", "").split(",")))
        except ValueError:
            return JSONResponse({"error": "after, window and status are numbers"}, status_code=400)
        if status not in (200, 403) or window <= 0 or after < 0:
            return JSONResponse({"error": "status is 200 or 403, window > 0, after >= 0"}, status_code=400)
        wall.configure(after, window, status, cookie, clients)
        return JSONResponse({"after": after, "window": window, "status": status, "cookie": cookie,
                             "clients": sorted(clients)})

    async def show(request: Request) -> HTMLResponse:
        return HTMLResponse(CHALLENGE_PAGE, status_code=403 if request.query_params.get("status") == "403" else 200)

    async def figures(request: Request) -> JSONResponse:
        return JSONResponse({"after": wall.after, "window": wall.window_seconds, "status": wall.status,
                             "challenged": wall.challenged, "cookie": wall.cookie, "clients": sorted(wall.clients),
                             "served": dict(wall.served),
                             "challenged_by": dict(wall.challenged_by)})

    return [Route("/_challenge", control, methods=["POST"]), Route("/_challenge", figures, methods=["GET"]),
            Route("/challenge", show)]
