"""Response bodies read with a hard cap on DECODED bytes: decompression bombs stay harmless.

httpx decodes each network chunk whole, so 1,827 bytes of ``Content-Encoding: gzip, gzip`` become
2 GB in one call (and block the event loop while they do). Here the raw bytes are decoded by zlib
(or brotli) with an output limit on every call, so at most ``cap`` decoded bytes ever exist and each
call is short. At most one content encoding is accepted: stacked encodings serve no honest purpose
and are refused with their reason, as are unknown ones and corrupt data.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from harvester.errors import BodyRefused

ACCEPT_ENCODING = "gzip, deflate, br"


class Decoder(Protocol):
    def decode(self, data: bytes, limit: int) -> bytes:
        """At most ``limit`` decoded bytes of ``data`` (and of what earlier calls left over)."""
        ...

    @property
    def pending(self) -> bool:
        """Whether decoded output is still waiting for a later call (the limit was reached)."""
        ...


class IdentityDecoder:
    pending = False

    def decode(self, data: bytes, limit: int) -> bytes:
        self.pending = len(data) > limit
        return data[:limit]


class ZlibDecoder:
    """gzip (``wbits`` 16+15) or deflate (zlib-wrapped, or raw as some servers send it)."""

    def __init__(self, wbits: int) -> None:
        self.raw_fallback = wbits == zlib.MAX_WBITS
        self.inflater = zlib.decompressobj(wbits)
        self.started = False

    @property
    def pending(self) -> bool:
        return bool(self.inflater.unconsumed_tail)

    def decode(self, data: bytes, limit: int) -> bytes:
        data = self.inflater.unconsumed_tail + data
        if self.inflater.eof:  # trailing bytes after the stream's end are ignored, as browsers do
            return b""
        try:
            out = self.inflater.decompress(data, limit)
        except zlib.error:
            if not (self.raw_fallback and not self.started):
                raise
            self.inflater = zlib.decompressobj(-zlib.MAX_WBITS)  # "deflate" meaning raw deflate
            out = self.inflater.decompress(data, limit)
        self.started = True
        return out


class BrotliDecoder:
    def __init__(self) -> None:
        import brotli

        self.decompressor = brotli.Decompressor()
        self._pending = False

    @property
    def pending(self) -> bool:
        return self._pending

    def decode(self, data: bytes, limit: int) -> bytes:
        if self.decompressor.is_finished():
            return b""
        out = self.decompressor.process(data, output_buffer_limit=max(1, limit))
        self._pending = not self.decompressor.can_accept_more_data()
        return out


def decoder_for(content_encoding: str | None) -> Decoder:
    """The decoder of a ``Content-Encoding`` header; raises :class:`BodyRefused` for anything but one
    known encoding."""
    codings = [part.strip().lower() for part in (content_encoding or "").split(",") if part.strip()]
    codings = [coding for coding in codings if coding != "identity"]
    if not codings:
        return IdentityDecoder()
    if len(codings) > 1:
        raise BodyRefused(f"more than one content encoding refused: {', '.join(codings)}")
    coding = codings[0]
    if coding in ("gzip", "x-gzip"):
        return ZlibDecoder(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return ZlibDecoder(zlib.MAX_WBITS)
    if coding == "br":
        return BrotliDecoder()
    raise BodyRefused(f"content encoding refused: {coding!r} is not one of gzip, deflate, br")


@dataclass(slots=True)
class Body:
    """The decoded bytes (at most the cap), whether the cap cut them, and the bytes on the wire."""

    content: bytes
    truncated: bool
    wire_bytes: int
    raw_cut: bool = False  # the reader stopped at the raw-bytes cap (``wire_cap`` of read_body)


class WireCap:
    """At most ``cap`` bytes read off the wire (``raw_body_cap_bytes``): bytes that decode to nothing
    (empty deflate blocks, padding) are not read until the timeout. The one such cap: pages (:func:`read_body`)
    and sitemaps (``harvester.scraping.discovery.sitemaps``) read through it."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.read = 0
        self.reached = False  # more came than the cap: what was read is cut at it

    async def chunks(self, raw_chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in raw_chunks:
            room = self.cap - self.read
            self.read += len(chunk)
            if len(chunk) > room:
                self.reached = True
                if room > 0:
                    yield chunk[:room]
                return
            yield chunk


async def read_body(raw_chunks: AsyncIterator[bytes], content_encoding: str | None, cap: int,
                    wire_cap: int | None = None) -> Body:
    """Decode ``raw_chunks`` up to ``cap`` decoded bytes, reading at most ``wire_cap`` bytes off the wire
    (:class:`WireCap`; cut there, the body keeps what decoded, ``truncated`` and ``raw_cut``). Raises
    :class:`BodyRefused` for a refused or corrupt encoding, or for ``wire_cap`` bytes that decoded to nothing;
    never holds more than ``cap`` decoded bytes, whatever the body claims."""
    if wire_cap is None:
        return await _decoded_body(raw_chunks, content_encoding, cap)
    limit = WireCap(wire_cap)
    body = await _decoded_body(limit.chunks(raw_chunks), content_encoding, cap)
    if limit.reached:
        if not body.content:
            raise BodyRefused(f"{wire_cap} raw bytes read decoded to nothing (HARVESTER_RAW_BODY_CAP_BYTES)")
        body.truncated = body.raw_cut = True
    return body


async def _decoded_body(raw_chunks: AsyncIterator[bytes], content_encoding: str | None, cap: int) -> Body:
    decoder = decoder_for(content_encoding)
    parts: list[bytes] = []
    size = wire = 0
    truncated = False
    try:
        async for chunk in raw_chunks:
            wire += len(chunk)
            out = decoder.decode(chunk, cap - size + 1)
            while True:
                if size + len(out) > cap:
                    parts.append(out[: cap - size])
                    size = cap
                    truncated = True
                    break
                parts.append(out)
                size += len(out)
                if not decoder.pending:
                    break
                out = decoder.decode(b"", cap - size + 1)
            if truncated:
                break
    except (zlib.error, EOFError) as error:
        raise BodyRefused(f"corrupt {content_encoding} body: {error}") from None
    except Exception as error:  # brotli's error class has no stable import path: told by name, others re-raised
        if type(error).__name__ == "error" and type(error).__module__ in ("brotli", "_brotli"):
            raise BodyRefused(f"corrupt {content_encoding} body: {error}") from None
        raise
    return Body(b"".join(parts), truncated, wire)
