"""Write the demo site's web font: a system TrueType font wrapped as WOFF2 (demo/harvester_demo/static).

The demo's product pages carry a real web font so a browser downloads what a shop would make it download
(and resource blocking has something real to cut). WOFF2 here is the format's null transform for every
table (glyf/loca transform version 3): the font's tables unchanged, one Brotli stream, which every
WOFF2 reader accepts. Run once; the output is committed. Needs ``brotli`` (installed with Scrapy's
bench peer) and the DejaVu fonts (Debian ``fonts-dejavu-core``; Bitstream Vera licence, redistributable).

Usage: .venv/bin/python scripts/make_demo_font.py [--font /usr/share/fonts/truetype/dejavu/DejaVuSans-ExtraLight.ttf]
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

import brotli

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
OUTPUT = REPOSITORY_ROOT / "demo" / "harvester_demo" / "static" / "font.woff2"
# WOFF2's known table tags, in the order of the spec's table (the index goes into the flags byte).
KNOWN_TAGS = [
    "cmap", "head", "hhea", "hmtx", "maxp", "name", "OS/2", "post", "cvt ", "fpgm", "glyf", "loca", "prep",
    "CFF ", "VORG", "EBDT", "EBLC", "gasp", "hdmx", "kern", "LTSH", "PCLT", "VDMX", "vhea", "vmtx", "BASE",
    "GDEF", "GPOS", "GSUB", "EBSC", "JSTF", "MATH", "CBDT", "CBLC", "COLR", "CPAL", "SVG ", "sbix", "acnt",
    "avar", "bdat", "bloc", "bsln", "cvar", "fdsc", "feat", "fmtx", "fvar", "gvar", "hsty", "just", "lcar",
    "mort", "morx", "opbd", "prop", "trak", "Zapf", "Silf", "Glat", "Gloc", "Feat", "Sill",
]
NULL_TRANSFORM = {"glyf": 3, "loca": 3}  # for every other table version 0 is the null transform


def uint_base128(value: int) -> bytes:
    """WOFF2's UIntBase128: big-endian groups of 7 bits, the high bit set on all but the last byte."""
    groups = [value & 0x7F]
    value >>= 7
    while value:
        groups.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(reversed(groups))


def tables_of(sfnt: bytes) -> list[tuple[str, bytes]]:
    flavor, count = struct.unpack(">IH", sfnt[:6])
    if flavor != 0x00010000:
        raise SystemExit("not a TrueType (glyf) font")
    tables = []
    for index in range(count):
        tag, _checksum, offset, length = struct.unpack(">4sIII", sfnt[12 + 16 * index:28 + 16 * index])
        tables.append((tag.decode("latin-1"), sfnt[offset:offset + length]))
    return sorted(tables)


def woff2(sfnt: bytes) -> bytes:
    tables = [(tag, data) for tag, data in tables_of(sfnt) if tag != "DSIG"]  # a signature would not hold
    directory = b""
    for tag, data in tables:
        transform = NULL_TRANSFORM.get(tag, 0)
        if tag in KNOWN_TAGS:
            directory += bytes([transform << 6 | KNOWN_TAGS.index(tag)])
        else:
            directory += bytes([transform << 6 | 63]) + tag.encode("latin-1")
        directory += uint_base128(len(data))
    compressed = brotli.compress(b"".join(data for _, data in tables), mode=brotli.MODE_FONT, quality=11)
    padded = compressed + b"\0" * (-len(compressed) % 4)
    total_sfnt = 12 + 16 * len(tables) + sum(len(data) + (-len(data) % 4) for _, data in tables)
    length = 48 + len(directory) + len(padded)
    length += -length % 4
    header = struct.pack(">4sIIHHIIHHIIIII", b"wOF2", 0x00010000, length, len(tables), 0, total_sfnt,
                         len(compressed), 1, 0, 0, 0, 0, 0, 0)
    body = header + directory + padded
    return body + b"\0" * (length - len(body))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--font", default="/usr/share/fonts/truetype/dejavu/DejaVuSans-ExtraLight.ttf")
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args()
    data = woff2(Path(args.font).read_bytes())
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_bytes(data)
    print(f"{args.output}: {len(data)} bytes from {args.font}")


if __name__ == "__main__":
    main()
