"""What a real shop's product page makes a browser download, generated deterministically.

A product page links a stylesheet (~50 KB), preloads a web font (a real WOFF2, ~90 KB: DejaVu Sans
ExtraLight, written by scripts/make_demo_font.py, licence in static/font.LICENSE) and shows a product
photo (a 480x360 PNG, ~200-240 KB); the stylesheet adds a background texture (a 64x64 PNG, ~12 KB):
about 370 KB a page besides its HTML. Photos are noisy gradients, so they compress like photos rather
than like flat colour. Everything is the same bytes on
every start, so byte counts through a proxy compare between runs and between crawlers.
"""

from __future__ import annotations

import functools
import random
import struct
import zlib
from pathlib import Path

STATIC = Path(__file__).parent / "static"
PHOTO_SIZE = (480, 360)
PHOTO_NOISE_BITS = 2  # low bits of each channel left to chance: how much the photo resists compression
STYLE_RULES = 420  # rules of the generated stylesheet (each ~90 bytes)
PALETTE = ["#1f2933", "#323f4b", "#3e4c59", "#52606d", "#616e7c", "#7b8794", "#9aa5b1", "#cbd2d9",
           "#e4e7eb", "#f5f7fa", "#c9372c", "#2680c2", "#27ab83", "#f0b429"]


def _png(width: int, height: int, pixels: bytes) -> bytes:
    """A valid RGB PNG (filter type 0 on every row)."""
    row = width * 3
    raw = b"".join(b"\x00" + pixels[y * row:(y + 1) * row] for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


@functools.cache
def _gradient(width: int, height: int) -> int:
    """A diagonal light gradient over the whole image, as one big integer (XOR-able with noise)."""
    row = bytearray()
    for x in range(width):
        shade = 96 + (x * 96) // width
        row += bytes((shade, shade, shade))
    rows = [bytes((value + (y * 48) // height) & 0xF8 for value in row) for y in range(height)]
    return int.from_bytes(b"".join(rows), "big")


@functools.lru_cache(maxsize=128)
def product_photo(seed: int, width: int = PHOTO_SIZE[0], height: int = PHOTO_SIZE[1]) -> bytes:
    """The photo of product ``seed``: its own tint and noise over the shared gradient (~200 KB)."""
    size = width * height * 3
    rng = random.Random(seed)
    mask = (1 << PHOTO_NOISE_BITS) - 1
    noise = rng.randbytes(size).translate(bytes(value & mask for value in range(256)))
    tint = bytes(((seed * 37) % 8, (seed * 91) % 8, (seed * 53) % 8)) * (width * height)
    pixels = _gradient(width, height) ^ int.from_bytes(noise, "big") ^ int.from_bytes(tint, "big")
    return _png(width, height, pixels.to_bytes(size, "big"))


@functools.cache
def background_texture() -> bytes:
    """The page background the stylesheet tiles (64x64)."""
    return product_photo(0, 64, 64)


@functools.cache
def stylesheet() -> str:
    """The shop's stylesheet: its web font, the background photo and a few hundred component rules."""
    rng = random.Random(20261201)
    rules = [
        "@font-face{font-family:Demo;font-weight:200;font-display:swap;"
        "src:url(/static/font.woff2) format('woff2')}",
        "body{font-family:Demo,sans-serif;margin:0;color:#1f2933;background:url(/static/img/texture.png)}",
        "nav{display:flex;gap:1rem;padding:1rem 2rem;background:#f5f7fa}",
        ".product{display:grid;grid-template-columns:1fr 1fr;gap:2rem;max-width:72rem;margin:2rem auto}",
        ".product .photo{width:100%;height:auto;border-radius:.5rem}",
    ]
    components = ["card", "badge", "button", "price", "rating", "tag", "gallery", "review", "cart", "menu",
                  "banner", "footer", "grid", "hero", "modal", "tabs", "toast", "filter", "sort", "pager"]
    for index in range(STYLE_RULES):
        name = f"{components[index % len(components)]}-{index // len(components)}"
        rules.append(
            f".{name}{{margin:{rng.randint(0, 48)}px {rng.randint(0, 32)}px;padding:{rng.randint(0, 24)}px;"
            f"color:{rng.choice(PALETTE)};background:{rng.choice(PALETTE)};"
            f"border:{rng.randint(0, 3)}px solid {rng.choice(PALETTE)};font-size:{rng.randint(10, 32)}px}}"
        )
        if index % 7 == 0:
            rules.append(f"@media (max-width:{rng.randint(480, 1200)}px){{.{name}{{display:none}}}}")
    return "\n".join(rules) + "\n"


@functools.cache
def web_font() -> bytes:
    return (STATIC / "font.woff2").read_bytes()
