"""Items that go away and come back, as real shops delist them.

- ``/life/shop/``: the listing (links to every item still listed, ``?products=N``, default 50);
  ``/life/shop/item/<id>``: an item's page while it is listed;
- ``POST /_life/delist?product=<id>&how=<way>`` delists an item one way: ``410`` (Gone), ``404``, ``soft`` (a
  "Product not found" page answered 200, the usual soft 404), ``home`` (a 302 to the home page) or ``listing``
  (a 302 to ``/life/shop/``); ``POST /_life/relist?product=<id>`` lists it again; ``POST /_life/reset`` relists
  every item;
- ``/life/old/item/<id>``: the item's old address, a 301 to its page (a redirect that stays on the item),
  and ``http://``-to-``https://``-like moves are the same shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

DELISTING_WAYS = ("410", "404", "soft", "home", "listing")
SOFT_NOT_FOUND = ('<div class="not-found"><h1>Product not found</h1>'
                  "<p>This product is no longer available. Browse our other products.</p></div>")


def lifecycle_routes(product_body: Callable[..., str], page: Callable[[str, str], str],
                     product_facts: Callable[[int], dict[str, Any]]) -> list[Route]:
    """The routes, built with the app's own product helpers; which items are delisted (and how) is theirs."""
    delisted: dict[int, str] = {}

    def base(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    async def listing(request: Request) -> Response:
        try:
            count = max(1, min(10_000, int(request.query_params.get("products", 50))))
        except ValueError:
            count = 50
        links = "".join(f'<li><a class="product-link" href="/life/shop/item/{product_id}">item {product_id}</a></li>'
                        for product_id in range(1, count + 1) if product_id not in delisted)
        return HTMLResponse(page("Shop", f"<h1>Shop</h1><ul>{links}</ul>"))

    async def item(request: Request) -> Response:
        product_id = int(request.path_params["product_id"])
        way = delisted.get(product_id)
        if way in ("410", "404"):
            return HTMLResponse(page("Gone", "<h1>This page does not exist</h1>"), status_code=int(way))
        if way == "soft":
            return HTMLResponse(page("Product not found", SOFT_NOT_FOUND))
        if way == "home":
            return RedirectResponse(f"{base(request)}/", status_code=302)
        if way == "listing":
            return RedirectResponse(f"{base(request)}/life/shop/", status_code=302)
        return HTMLResponse(page(product_facts(product_id)["title"], product_body(product_id)))

    async def old_address(request: Request) -> Response:
        return RedirectResponse(f"{base(request)}/life/shop/item/{request.path_params['product_id']}",
                                status_code=301)

    async def delist(request: Request) -> JSONResponse:
        way = request.query_params.get("how", "410")
        if way not in DELISTING_WAYS:
            return JSONResponse({"error": f"how: one of {', '.join(DELISTING_WAYS)}"}, status_code=400)
        delisted[int(request.query_params.get("product", "1"))] = way
        return JSONResponse({"delisted": {str(key): value for key, value in delisted.items()}})

    async def relist(request: Request) -> JSONResponse:
        delisted.pop(int(request.query_params.get("product", "1")), None)
        return JSONResponse({"delisted": {str(key): value for key, value in delisted.items()}})

    async def reset(request: Request) -> JSONResponse:
        delisted.clear()
        return JSONResponse({"delisted": {}})

    return [
        Route("/life/shop/", listing),
        Route("/life/shop/item/{product_id:int}", item),
        Route("/life/old/item/{product_id:int}", old_address),
        Route("/_life/delist", delist, methods=["POST"]),
        Route("/_life/relist", relist, methods=["POST"]),
        Route("/_life/reset", reset, methods=["POST"]),
    ]
