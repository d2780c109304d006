"""The demo site counts what tests assert on: concurrent requests per client, totals, statuses."""

from __future__ import annotations

import asyncio

import httpx
import pytest

pytestmark = pytest.mark.integration


def test_concurrency_is_counted_per_client(demo_site) -> None:
    async def hammer() -> None:
        async with httpx.AsyncClient(base_url=demo_site.url, timeout=10) as client:
            await asyncio.gather(*(client.get("/slow/1?delay=0.5", headers={"X-Demo-Client": "five"})
                                   for _ in range(5)))
            await client.get("/status/500", headers={"X-Demo-Client": "one"})

    asyncio.run(hammer())
    five, one = demo_site.client_stats("five"), demo_site.client_stats("one")
    assert (five["max_concurrent"], five["total"], five["current"]) == (5, 5, 0)
    assert (one["max_concurrent"], one["statuses"]) == (1, {"500": 1})
    demo_site.reset()
    assert demo_site.stats()["clients"] == {}


def test_catalogue_pagination_and_assets(demo_site) -> None:
    with httpx.Client(base_url=demo_site.url, timeout=10) as client:
        last = client.get("/shop?page=25")
        assert last.status_code == 200 and 'class="next"' not in last.text and "/product/500?" in last.text
        assert client.get("/product/501").status_code == 404
        image = client.get("/static/img/3.png")
        assert image.headers["content-type"] == "image/png" and image.content.startswith(b"\x89PNG")
        assert client.get("/static/font.woff2").headers["content-type"] == "font/woff2"
        assert client.get("/redirect-loop/a").status_code == 302
