"""The demo site counts what tests assert on: concurrent requests per client, totals, statuses."""

from __future__ import annotations

import asyncio
import struct
import zlib

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
        assert client.get("/static/img/3.png").content == image.content  # the same bytes every time
        assert client.get("/static/img/4.png").content != image.content
        assert client.get("/redirect-loop/a").status_code == 302


def png_size_and_rows(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed rows of an RGB PNG, checking every chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, chunks = 8, {}
    while offset < len(data):
        (length,), kind = struct.unpack(">I", data[offset:offset + 4]), data[offset + 4:offset + 8]
        body = data[offset + 8:offset + 8 + length]
        assert struct.unpack(">I", data[offset + 8 + length:offset + 12 + length])[0] == zlib.crc32(kind + body)
        chunks[kind] = body
        offset += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour_type) == (8, 2) and b"IEND" in chunks
    return width, height, zlib.decompress(chunks[b"IDAT"])


def test_a_product_page_carries_a_few_hundred_kb_of_real_assets(demo_site) -> None:
    """What a browser downloads for one product page: stylesheet, web font, photo, background texture."""
    with httpx.Client(base_url=demo_site.url, timeout=30) as client:
        page = client.get("/js/product/7").text
        assets = ["/static/site.css", "/static/font.woff2", "/static/img/7.png"]
        assert all(f'"{path}"' in page or f"{path}" in page for path in ("/static/site.css", "/static/font.woff2"))
        assert "/static/img/7.png" in client.get("/product/7").text  # the photo (the JS page writes it in)
        css = client.get("/static/site.css").text
        assert "url(/static/font.woff2)" in css and "url(/static/img/texture.png)" in css
        responses = {path: client.get(path) for path in [*assets, "/static/img/texture.png"]}
    sizes = {path: len(response.content) for path, response in responses.items()}
    assert 250_000 <= sum(sizes.values()) <= 700_000, sizes  # a few hundred KB, as a real shop's page
    assert all(response.headers["cache-control"] == "public, max-age=3600" for response in responses.values())

    font = responses["/static/font.woff2"].content  # a WOFF2 whose header adds up (Chromium renders it)
    signature, flavor, length, tables = struct.unpack(">4sIIH", font[:14])
    assert (signature, flavor, length) == (b"wOF2", 0x00010000, len(font)) and tables >= 10
    width, height, rows = png_size_and_rows(responses["/static/img/7.png"].content)
    assert (width, height) == (480, 360) and len(rows) == height * (1 + 3 * width)
    assert len(set(rows)) > 4  # not a flat colour: it compresses like a photo
