"""The demo site's pages that publish their data: the shapes real shops use besides markup.

Every page describes the same products as ``/product/<id>`` (``product_facts``), so a source of any
shape can be checked against the truth and against each other:

- ``/ld/product/<id>``: JSON-LD, a ``@graph`` (WebPage, Product, BreadcrumbList) and a second block
  that is a list (Organization, WebSite);
- ``/md/product/<id>``: microdata (a Product with a nested Offer and Brand);
- ``/og/product/<id>``: OpenGraph and Twitter ``<meta>`` tags only;
- ``/next/product/<id>``: a Next.js-style ``<script id="__NEXT_DATA__">`` JSON blob, nothing in the markup;
- ``/nuxt/product/<id>``: a JavaScript object literal (``window.__NUXT__ = {...}``: unquoted keys, quotes);
- ``/api/products?page=&per_page=``: a JSON API, paginated with a ``next`` link; ``/api/product/<id>``;
- ``/catalog?page=&per_page=``: a listing whose items carry every field (markup and an ItemList JSON-LD),
  with links to the JSON-LD product pages and a next page.
"""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

STRUCTURED_PAGES = ["/ld/product/1", "/md/product/1", "/og/product/1", "/next/product/1", "/nuxt/product/1",
                    "/api/products", "/api/product/1", "/catalog"]
BRAND = "Acme Widgets"


def product_document(product_id: int, facts: dict[str, Any]) -> dict[str, Any]:
    """The product as its data (JSON-LD's schema.org Product shape)."""
    return {
        "@type": "Product", "name": facts["title"], "sku": facts["sku"], "brand": {"@type": "Brand", "name": BRAND},
        "image": facts["image"], "description": facts["description"],
        "releaseDate": facts["released"].isoformat(),
        "dateModified": f"{facts['released'].isoformat()}T09:30:00+02:00",
        "offers": {"@type": "Offer", "price": f"{facts['price']:.2f}", "priceCurrency": "EUR",
                   "availability": "https://schema.org/InStock" if facts["in_stock"] else "https://schema.org/OutOfStock",
                   "inventoryLevel": {"@type": "QuantitativeValue", "value": facts["stock"]}},
    }


def api_item(product_id: int, facts: dict[str, Any]) -> dict[str, Any]:
    """The product as a shop's own JSON API gives it."""
    return {"id": product_id, "sku": facts["sku"], "title": facts["title"], "brand": BRAND,
            "price": {"amount": f"{facts['price']:.2f}", "currency": "EUR"}, "stock": facts["stock"],
            "in_stock": facts["in_stock"], "released": facts["released"].isoformat(), "image": facts["image"],
            "tags": facts["tags"], "url": f"/ld/product/{product_id}"}


def _script(data: Any, kind: str = "application/ld+json", element_id: str | None = None) -> str:
    text = json.dumps(data).replace("</", "<\\/")  # never closes the script early
    return f'<script type="{kind}"{f" id={element_id!r}" if element_id else ""}>{text}</script>'


def structured_routes(products: Callable[[], int], product_facts: Callable[[int], dict[str, Any]],
                      page: Callable[[str, str], str], latency: Callable[..., Awaitable[None]]) -> list[Route]:
    """The routes, built with the app's own facts and page helper (``products()``: how many exist now)."""

    def found(request: Request) -> int | None:
        product_id = int(request.path_params["product_id"])
        return product_id if 1 <= product_id <= products() else None

    def not_found() -> HTMLResponse:
        return HTMLResponse(page("Not found", "<h1>No such product</h1>"), status_code=404)

    def product_route(render: Callable[[int, dict[str, Any]], str]) -> Callable[[Request], Awaitable[Response]]:
        """A product page of one shape: 404 for an unknown product, the site's latency, then ``render``."""

        async def endpoint(request: Request) -> Response:
            product_id = found(request)
            if product_id is None:
                return not_found()
            await latency(product_id)
            return HTMLResponse(render(product_id, product_facts(product_id)))

        return endpoint

    def jsonld_product(product_id: int, facts: dict[str, Any]) -> str:
        graph = {"@context": "https://schema.org", "@graph": [
            {"@type": "WebPage", "@id": f"/ld/product/{product_id}", "name": facts["title"]},
            {**product_document(product_id, facts), "@id": f"/ld/product/{product_id}#product"},
            {"@type": "BreadcrumbList", "itemListElement": [
                {"@type": "ListItem", "position": 1, "name": "Shop", "item": "/catalog"}]},
        ]}
        listed = [{"@context": "https://schema.org", "@type": "Organization", "name": BRAND, "url": "/"},
                  {"@context": "https://schema.org", "@type": "WebSite", "name": "Demo Shop"}]
        body = (f'{_script(graph)}{_script(listed)}<article class="product-card">'
                f'<h1>{html.escape(facts["title"])}</h1><p>Details are in the page data.</p></article>')
        return page(facts["title"], body)

    def microdata_product(product_id: int, facts: dict[str, Any]) -> str:
        availability = "InStock" if facts["in_stock"] else "OutOfStock"
        body = (
            '<div itemscope itemtype="https://schema.org/Product">'
            f'<h1 itemprop="name">{html.escape(facts["title"])}</h1>'
            f'<span>SKU: <span itemprop="sku">{facts["sku"]}</span></span>'
            '<div itemprop="brand" itemscope itemtype="https://schema.org/Brand">'
            f'<span itemprop="name">{BRAND}</span></div>'
            f'<img itemprop="image" src="{facts["image"]}" alt="photo">'
            f'<time itemprop="releaseDate" datetime="{facts["released"].isoformat()}">'
            f'{facts["released"]:%d %b %Y}</time>'
            '<div itemprop="offers" itemscope itemtype="https://schema.org/Offer">'
            f'<span itemprop="price" content="{facts["price"]:.2f}">{facts["price"]:,.2f} €</span>'
            '<meta itemprop="priceCurrency" content="EUR">'
            f'<link itemprop="availability" href="https://schema.org/{availability}">{availability}</div></div>'
        )
        return page(facts["title"], body)

    def opengraph_product(product_id: int, facts: dict[str, Any]) -> str:
        metas = {
            "og:type": "product", "og:title": facts["title"], "og:image": facts["image"],
            "og:url": f"/og/product/{product_id}", "product:price:amount": f"{facts['price']:.2f}",
            "product:price:currency": "EUR", "product:retailer_item_id": facts["sku"],
            "product:availability": "in stock" if facts["in_stock"] else "out of stock",
        }
        tags = "".join(f'<meta property="{name}" content="{html.escape(value)}">' for name, value in metas.items())
        tags += (f'<meta name="twitter:card" content="summary"><meta name="twitter:title" '
                 f'content="{html.escape(facts["title"])}"><meta name="description" '
                 f'content="{html.escape(facts["description"] or facts["title"])}">')
        document = page(facts["title"], '<div id="root">A product</div>')
        return document.replace("</head>", tags + "</head>", 1)

    def next_product(product_id: int, facts: dict[str, Any]) -> str:
        data = {"props": {"pageProps": {"product": api_item(product_id, facts)}}, "page": "/product/[id]",
                "query": {"id": str(product_id)}, "buildId": "demo"}
        body = '<div id="__next"></div>' + _script(data, "application/json", "__NEXT_DATA__")
        return page(facts["title"], body)

    def nuxt_product(product_id: int, facts: dict[str, Any]) -> str:
        tags = ", ".join(f"'{tag}'" for tag in facts["tags"])
        literal = (f"{{data: [{{product: {{sku: '{facts['sku']}', title: {json.dumps(facts['title'])}, "
                   f"price: {facts['price']:.2f}, currency: 'EUR', stock: {facts['stock']}, "
                   f"inStock: {'true' if facts['in_stock'] else 'false'}, released: '{facts['released'].isoformat()}', "
                   f"tags: [{tags}], image: '{facts['image']}',}}}}], state: {{cart: undefined}}}}")
        body = f'<div id="__nuxt"></div><script>window.__NUXT__ = {literal};</script>'
        return page(facts["title"], body)

    def page_numbers(request: Request, default_per_page: int) -> tuple[int, int, int, int]:
        try:
            number = max(1, int(request.query_params.get("page", 1)))
            per_page = max(1, min(1000, int(request.query_params.get("per_page", default_per_page))))
        except ValueError:
            number, per_page = 1, default_per_page
        first = (number - 1) * per_page + 1
        return number, per_page, first, min(products(), first + per_page - 1)

    async def api_products(request: Request) -> JSONResponse:
        number, per_page, first, last = page_numbers(request, 20)
        await latency()
        items = [api_item(product_id, product_facts(product_id)) for product_id in range(first, last + 1)]
        following = f"/api/products?page={number + 1}&per_page={per_page}" if last < products() else None
        return JSONResponse({"items": items, "page": number, "total": products(), "links": {"next": following}})

    async def api_product(request: Request) -> Response:
        product_id = found(request)
        if product_id is None:
            return JSONResponse({"error": "no such product"}, status_code=404)
        await latency(product_id)
        return JSONResponse({"product": api_item(product_id, product_facts(product_id))})

    async def catalog(request: Request) -> HTMLResponse:
        number, per_page, first, last = page_numbers(request, 20)
        await latency()
        items, listed = [], []
        for position, product_id in enumerate(range(first, last + 1), start=1):
            facts = product_facts(product_id)
            items.append(
                f'<li class="card" data-sku="{facts["sku"]}"><a class="card-link" href="/ld/product/{product_id}">'
                f'<h2 class="name">{html.escape(facts["title"])}</h2></a>'
                f'<span class="code">{facts["sku"]}</span><span class="amount">€ {facts["price"]:,.2f}</span>'
                f'<span class="left">{facts["stock"]}</span>'
                f'<span class="availability">{"in stock" if facts["in_stock"] else "sold out"}</span>'
                f'<time class="since" datetime="{facts["released"].isoformat()}">{facts["released"]:%d.%m.%Y}</time>'
                f'<img class="thumb" src="{facts["image"]}" alt=""></li>')
            listed.append({"@type": "ListItem", "position": position,
                           "item": {**product_document(product_id, facts), "url": f"/ld/product/{product_id}"}})
        pagination = (f'<a class="next" rel="next" href="/catalog?page={number + 1}&amp;per_page={per_page}">Next</a>'
                      if last < products() else "")
        data = {"@context": "https://schema.org", "@type": "ItemList", "itemListElement": listed}
        body = f'{_script(data)}<ul class="cards">{"".join(items)}</ul><nav class="pages">{pagination}</nav>'
        return HTMLResponse(page(f"Catalog page {number}", body))

    return [
        Route("/ld/product/{product_id:int}", product_route(jsonld_product)),
        Route("/md/product/{product_id:int}", product_route(microdata_product)),
        Route("/og/product/{product_id:int}", product_route(opengraph_product)),
        Route("/next/product/{product_id:int}", product_route(next_product)),
        Route("/nuxt/product/{product_id:int}", product_route(nuxt_product)),
        Route("/api/products", api_products),
        Route("/api/product/{product_id:int}", api_product),
        Route("/catalog", catalog),
    ]
