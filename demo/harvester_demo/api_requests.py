"""APIs behind POST: a GraphQL storefront with cursor pagination and a search endpoint with pages.

- ``POST /graphql`` takes ``{query, variables: {first, after}}`` (``first`` at most 50) and answers a
  connection: ``data.products.edges[].node`` and ``pageInfo {endCursor, hasNextPage}``; the query must ask
  for ``products`` (else ``errors``, as GraphQL servers answer); ``variables.tag`` filters; each node names
  its detail in the JSON API (``api_url``). ``variables.segment`` and ``variables.totalSegments`` partition the
  items as DynamoDB's parallel scan does (product number modulo ``totalSegments`` == ``segment``), each segment its
  own cursor sequence, so a harvest can follow several cursor chains at once; values out of range answer
  ``errors``.
- ``POST /search`` takes ``{query, page, hitsPerPage}`` (JSON or a form) and answers
  ``{hits, page, nbPages, nbHits}`` (pages from 1), ``query`` matching a tag; ``/search-busy/<token>``
  answers its first request with a 429 and ``Retry-After: 1``, then as ``/search``.
- ``POST /graphql-moved/<code>`` redirects to ``/graphql`` (or ``?to=``) with that status (a 307 or 308 keeps
  the body).
- Any other method on these paths is a 405: a crawler that GETs the endpoint instead is told so.
- ``GET /_stats/api`` counts requests by ``METHOD path`` (``POST /_stats/api/reset`` empties it).
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from harvester_demo.structured import api_item

MAX_FIRST = 50
API_METHODS = ["GET", "POST", "PUT", "DELETE"]


def cursor_of(position: int) -> str:
    return base64.b64encode(f"cursor:{position}".encode()).decode()


def position_of(cursor: Any) -> int:
    """The position a cursor stands for; a cursor this server did not give reads as the start."""
    try:
        return int(base64.b64decode(str(cursor)).decode().removeprefix("cursor:"))
    except ValueError:
        return 0


def segment_of(variables: dict[str, Any]) -> tuple[int, int] | str:
    """``(segment, totalSegments)`` of a query's variables (``(0, 1)``: every item), or why they are invalid."""
    if variables.get("segment") is None and variables.get("totalSegments") is None:
        return 0, 1
    segment, total = variables.get("segment"), variables.get("totalSegments")
    if not isinstance(segment, int) or not isinstance(total, int) or isinstance(segment, bool) \
            or isinstance(total, bool):
        return "segment and totalSegments are both integers"
    if total < 1 or not 0 <= segment < total:
        return "segment must be in 0..totalSegments-1 and totalSegments at least 1"
    return segment, total


def api_request_routes(products: Callable[[], int], product_facts: Callable[[int], dict[str, Any]],
                       latency: Callable[..., Awaitable[None]]) -> list[Route]:
    counts: dict[str, int] = defaultdict(int)
    busy_tokens: dict[str, int] = defaultdict(int)

    def matching(tag: str | None) -> list[int]:
        every = range(1, products() + 1)
        return [number for number in every if not tag or tag in product_facts(number)["tags"]]

    async def body_of(request: Request) -> dict[str, Any] | None:
        raw = await request.body()
        if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return dict(parse_qsl(raw.decode()))
        try:
            body = json.loads(raw)
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def counted(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def wrapped(request: Request) -> Response:
            counts[f"{request.method} {request.url.path}"] += 1
            if request.method != "POST":
                return JSONResponse({"errors": [{"message": "POST only"}]}, status_code=405,
                                    headers={"Allow": "POST"})
            return await endpoint(request)

        return wrapped

    async def graphql(request: Request) -> Response:
        body = await body_of(request)
        if body is None or "products" not in str(body.get("query", "")):
            return JSONResponse({"errors": [{"message": "the query must ask for products"}]}, status_code=400)
        variables = body.get("variables") or {}
        partition = segment_of(variables)
        if isinstance(partition, str):
            return JSONResponse({"errors": [{"message": partition}]}, status_code=400)
        segment, total = partition
        first = max(1, min(MAX_FIRST, int(variables.get("first") or 10)))
        chosen = [number for number in matching(variables.get("tag")) if number % total == segment]
        start = position_of(variables["after"]) if variables.get("after") else 0
        window = chosen[start:start + first]
        await latency()
        end = start + len(window)
        return JSONResponse({"data": {"products": {
            "totalCount": len(chosen),
            "edges": [{"cursor": cursor_of(start + index + 1),
                       "node": {**api_item(number, product_facts(number)), "api_url": f"/api/product/{number}"}}
                      for index, number in enumerate(window)],
            "pageInfo": {"endCursor": cursor_of(end) if window else None, "hasNextPage": end < len(chosen)},
        }}})

    async def search(request: Request) -> Response:
        body = await body_of(request)
        if body is None:
            return JSONResponse({"message": "a JSON or form body is needed"}, status_code=400)
        try:
            page = max(1, int(body.get("page") or 1))
            per_page = max(1, min(100, int(body.get("hitsPerPage") or 20)))
        except ValueError:
            return JSONResponse({"message": "page and hitsPerPage are numbers"}, status_code=400)
        chosen = matching(str(body.get("query") or "") or None)
        pages = max(1, -(-len(chosen) // per_page))
        window = chosen[(page - 1) * per_page:page * per_page]
        await latency()
        return JSONResponse({"hits": [api_item(number, product_facts(number)) for number in window],
                             "page": page, "nbPages": pages, "nbHits": len(chosen), "query": body.get("query")})

    async def search_busy(request: Request) -> Response:
        token = request.path_params["token"]
        busy_tokens[token] += 1
        if busy_tokens[token] == 1:
            return JSONResponse({"message": "slow down"}, status_code=429, headers={"Retry-After": "1"})
        return await search(request)

    async def graphql_moved(request: Request) -> Response:
        return RedirectResponse(request.query_params.get("to", "/graphql"), status_code=request.path_params["code"])

    async def api_stats(request: Request) -> JSONResponse:
        return JSONResponse(dict(counts))

    async def api_stats_reset(request: Request) -> JSONResponse:
        counts.clear()
        busy_tokens.clear()
        return JSONResponse({"reset": True})

    return [
        Route("/graphql", counted(graphql), methods=API_METHODS),
        Route("/search", counted(search), methods=API_METHODS),
        Route("/search-busy/{token}", counted(search_busy), methods=API_METHODS),
        Route("/graphql-moved/{code:int}", counted(graphql_moved), methods=API_METHODS),
        Route("/_stats/api", api_stats),
        Route("/_stats/api/reset", api_stats_reset, methods=["POST"]),
    ]
