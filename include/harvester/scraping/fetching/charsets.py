"""The charset a document is really in, decided in the WHATWG order, for every text Harvester reads: pages
(HTTP and the bytes the browser path decodes), sitemaps, feeds and robots.txt.

Why an order of our own rather than w3lib's ``html_to_unicode`` alone: with no detector, a page that names
no charset anywhere was decoded as UTF-8 with U+FFFD in place of every legacy byte, and w3lib's lenient
``<meta>`` scan finds declarations a browser ignores (and misses the ones a browser finds deep in the
page), so the text differed from what the site's author saw. The order (docs/sources.md, "Which charset"):

1. a byte order mark (UTF-8, UTF-16 and UTF-32, either byte order);
2. the HTTP ``Content-Type`` header's charset;
3. the document's own declaration: an XML prolog's ``encoding`` (sitemaps, feeds, XHTML), else a
   ``<meta>`` found by the WHATWG prescan (html5lib's implementation, the reference the html5lib-tests
   suite was written for), first over 1 KiB as the standard says, then over the head of the page
   (:data:`DEEP_SCAN_BYTES`) as a browser's parser would find it later and re-decode;
4. detection: ASCII-only text is windows-1252 (WHATWG's default; the same text as UTF-8), valid UTF-8 is
   UTF-8, anything else is what charset-normalizer finds most coherent; read from the first non-ASCII byte,
   however far into the page it comes.

Every label goes through the WHATWG label table (webencodings), then to the superset browsers decode it
with: ISO-8859-1 and ASCII as windows-1252, Shift_JIS as CP932, EUC-KR as CP949, GB2312 and GBK as
GB18030, Big5 as Big5-HKSCS. A ``<meta>`` naming UTF-16 means UTF-8 (a UTF-16 page could not have been
read as ASCII to find it), and UTF-7 is refused everywhere (it spells markup in plain ASCII).
"""

from __future__ import annotations

import codecs
import functools
import re
from dataclasses import dataclass
from typing import Literal

import charset_normalizer
import webencodings
from html5lib._inputstream import EncodingParser  # the WHATWG prescan; html5lib offers no public name for it
from w3lib.encoding import read_bom, to_unicode

from harvester.scraping.fetching.alphabets import alphabet_share

__all__ = [
    "DecodedText",
    "StreamDecoder",
    "declared_encoding",
    "decode_document",
    "detected_encoding",
    "document_encoding",
    "encoding_for_label",
    "header_encoding",
]

DecidedBy = Literal["bom", "header", "xml", "meta", "detection"]
PRESCAN_BYTES = 1024  # WHATWG's prescan reads this much
DEEP_SCAN_BYTES = 64 * 1024  # a <meta charset> past the prescan is still honoured within the page's head
DETECTION_BYTES = 256 * 1024  # charset-normalizer reads at most this much of a long document
ASCII_CONTEXT_BYTES = 1024  # of the ASCII before a long page's first non-ASCII byte, read with it
_NOT_ASCII = re.compile(rb"[\x80-\xff]")
STREAM_HEAD_BYTES = 8 * 1024  # a streamed document's charset is decided on this much of its start
# Python codec names of the supersets browsers decode a label's documents with, beyond webencodings' table
SUPERSETS = {"gbk": "gb18030", "gb2312": "gb18030", "euc_kr": "cp949", "shift_jis": "cp932", "big5": "big5hkscs",
             "latin_1": "cp1252", "iso8859-1": "cp1252", "ascii": "cp1252", "iso8859_9": "cp1254",
             "iso8859-9": "cp1254", "tis_620": "cp874", "iso8859_11": "cp874"}
REFUSED_CODECS = frozenset({"utf-7"})
_XML_PROLOG = re.compile(rb"""\A\s*<\?xml\s[^>]*?\bencoding\s*=\s*["']\s*([A-Za-z][\w.:\-]*)\s*["']""")
_MIME_PARAMETER = re.compile(r"""(?:^|;)[ \t]*(?P<name>[^\s;=,"]+)=
                                  (?:"(?P<quoted>[^"\\]*(?:\\.[^"\\]*)*)"|(?P<token>[^;,\s"]*))(?=[\s;,]|$)""",
                             re.VERBOSE)
_PYTHON_LABEL = re.compile(r"[A-Za-z0-9][\w.:\-]*")  # Python's lookup would read "'utf-8'" as utf-8
_CHARSET_WORD = re.compile(rb"charset", re.IGNORECASE)
_UNICODE_WIDE = frozenset({"utf-16", "utf-32"})
_ISO_2022_JP_ESCAPE = re.compile(rb"\x1b\$[@B]")
# the single-byte charsets browsers know (WHATWG), as Python names them, the more pages written in one the
# earlier (the last tie-break between readings equally written in one alphabet)
WEB_ORDER = {name: rank for rank, name in enumerate((
    "cp1252", "cp1251", "cp1250", "iso8859-15", "iso8859-2", "cp1256", "cp1254", "cp1253", "iso8859-7", "cp874",
    "cp1255", "cp1257", "koi8-r", "iso8859-5", "koi8-u", "iso8859-6", "iso8859-8", "iso8859-13", "cp1258",
    "iso8859-4", "iso8859-16", "iso8859-3", "iso8859-10", "iso8859-14", "cp866", "mac-roman", "mac-cyrillic"))}
SINGLE_BYTE = tuple(WEB_ORDER)

ALPHABET_SAMPLE_BYTES = 64 * 1024
_NOT_TEXT = re.compile("[\x80-\x9f\ufffd]")  # C1 controls and bytes a charset leaves undefined: never in text


@dataclass(frozen=True)
class DecodedText:
    """A document's text, the Python codec it was decoded with, and which step of the order decided it."""

    text: str
    encoding: str
    decided_by: DecidedBy


def _python_codec(name: str) -> str | None:
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        return None
    return None if codec in REFUSED_CODECS else SUPERSETS.get(codec, codec)


def encoding_for_label(label: str | None) -> str | None:
    """The Python codec a charset label means to a browser (WHATWG's label table, then the superset), or
    None for a label nobody knows. Labels WHATWG lacks but Python knows (``utf-32``, ``cp437``) are kept:
    a server that names one means it."""
    if not label:
        return None
    label = label.strip()
    if not label:
        return None
    encoding = webencodings.lookup(label)
    if encoding is not None:
        if encoding.name == "replacement":  # WHATWG's label for encodings that smuggle markup (ISO-2022-KR…)
            return None
        if encoding.name in ("utf-16le", "utf-16be") and label.lower() in ("utf-16", "utf16", "unicode"):
            return "utf-16"  # no byte order named: the bytes tell (see _wide_codec)
        return _python_codec(encoding.codec_info.name)
    return _python_codec(label) if _PYTHON_LABEL.fullmatch(label) else None


def header_encoding(content_type: str | None) -> str | None:
    """The charset a ``Content-Type`` header names, as a Python codec (None: none, or one nobody knows).
    Read by the MIME grammar, as Fetch does: ``charset=`` with no space around ``=``, a token or a whole
    quoted string (a ``charset=`` inside another parameter's quotes is not one), the first charset that
    names something (several values joined by commas: the first's)."""
    if not content_type:
        return None
    if content_type[:13].lower() == "content-type:":
        content_type = content_type[13:]
    for parameter in _MIME_PARAMETER.finditer(content_type):
        if parameter.group("name").lower() != "charset":
            continue
        label = parameter.group("quoted") if parameter.group("quoted") is not None else parameter.group("token")
        if label and (encoding := encoding_for_label(label)) is not None:
            return encoding
    return None


def _meta_encoding(head: bytes) -> str | None:
    encoding = EncodingParser(head).getEncoding()
    if encoding is None:
        return None
    if encoding.name in ("utf-16le", "utf-16be"):
        return "utf-8"
    if encoding.name == "x-user-defined":
        return "cp1252"
    return _python_codec(encoding.codec_info.name)


def declared_encoding(body: bytes) -> tuple[str, Literal["xml", "meta"]] | None:
    """The charset the document declares itself: an XML prolog's, else a ``<meta>`` by the WHATWG prescan."""
    prolog = _XML_PROLOG.match(body[:PRESCAN_BYTES])
    if prolog is not None:
        encoding = encoding_for_label(prolog.group(1).decode("ascii"))
        if encoding in _UNICODE_WIDE or encoding in ("utf-16-le", "utf-16-be"):
            encoding = "utf-8"  # the prolog was readable as ASCII, so the document is not UTF-16
        if encoding is not None:
            return encoding, "xml"
    encoding = _meta_encoding(body[:PRESCAN_BYTES])
    if encoding is None and len(body) > PRESCAN_BYTES and _CHARSET_WORD.search(body, PRESCAN_BYTES, DEEP_SCAN_BYTES):
        encoding = _meta_encoding(body[:DEEP_SCAN_BYTES])
    return (encoding, "meta") if encoding is not None else None


@functools.cache
def _single_byte(codec: str) -> bool:
    """A charset of one character per byte (each of the 256 bytes decodes to one character or to none)."""
    return len(bytes(range(256)).decode(codec, "replace")) == 256


def _most_likely(sample: bytes) -> str | None:
    """charset-normalizer's reading when it is a multi-byte charset (it tells those apart well); else the
    single-byte charset whose reading has the fewest C1 controls and undefined bytes (no text has them),
    then is written most wholly in one language's alphabet (:func:`alphabet_share`), ties going to the
    cleaner reading, then to the charset more pages were written in (:data:`WEB_ORDER`). charset-normalizer
    alone read a French page in windows-1252 as windows-1257 (``voilà`` as ``voilą``) with no mess at all:
    only a language's letters tell them apart."""
    readings = list(charset_normalizer.from_bytes(sample))
    if readings and not _single_byte(readings[0].encoding):
        return _python_codec(readings[0].encoding)
    mess = {codecs.lookup(reading.encoding).name: reading.chaos for reading in readings}
    text_sample = sample[:ALPHABET_SAMPLE_BYTES]

    def rank(codec: str) -> tuple[int, float, float, float, int]:
        text = text_sample.decode(codec, "replace")
        share, likeness = alphabet_share(text)
        return (len(_NOT_TEXT.findall(text)), -round(share, 2), -round(likeness, 2), mess.get(codec, 1.0),
                WEB_ORDER.get(codec, len(WEB_ORDER)))

    return _python_codec(min(SINGLE_BYTE, key=rank))


def detected_encoding(body: bytes) -> str:
    """The charset of a document that names none: windows-1252 for ASCII (WHATWG's default, the same text),
    ISO-2022-JP for ASCII with its escapes, UTF-8 when the bytes are valid UTF-8, else the most likely
    reading (:func:`_most_likely`). Read from the first non-ASCII byte on when the document's first
    :data:`DETECTION_BYTES` are ASCII: real pages open with hundreds of kilobytes of inline script, and a UTF-8
    page of the Zyte corpus whose first non-ASCII byte was at 770 KB was read as windows-1252 from its ASCII head
    (as Firefox's detector does, the guess waits for the bytes that tell)."""
    sample = body[:DETECTION_BYTES]
    if sample.isascii():
        if _ISO_2022_JP_ESCAPE.search(sample):
            return "iso2022_jp"
        first = _NOT_ASCII.search(body, len(sample))
        if first is None:
            return "cp1252"
        sample = body[max(0, first.start() - ASCII_CONTEXT_BYTES):first.start() + DETECTION_BYTES]
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(sample) - 4:  # not merely a character cut at the sample's end
            return _most_likely(sample) or "cp1252"
    return "utf-8"


def _wide_codec(encoding: str, body: bytes) -> str:
    """A UTF-16 or UTF-32 named without its byte order: told by where the zero bytes of ASCII text fall
    (big-endian when they cannot tell, as RFC 2781 says)."""
    if encoding == "utf-16":
        return "utf-16-le" if body[1:2] == b"\x00" and body[:1] != b"\x00" else "utf-16-be"
    if encoding == "utf-32":
        return "utf-32-le" if body[:1] != b"\x00" and body[1:4] == b"\x00\x00\x00" else "utf-32-be"
    return encoding


def _xml_wide_encoding(body: bytes) -> str | None:
    """A UTF-16 XML document without a BOM, told by its ``<?`` (XML 1.0, appendix F)."""
    if body.startswith(b"\x00<\x00?"):
        return "utf-16-be"
    if body.startswith(b"<\x00?\x00"):
        return "utf-16-le"
    return None


def document_encoding(body: bytes, content_type: str | None = None) -> tuple[str, DecidedBy, int]:
    """The Python codec ``body`` is in, which step of the WHATWG order decided it, and the length of its
    byte order mark (0 without one)."""
    bom_encoding, bom = read_bom(body)
    if bom_encoding is not None and bom is not None:
        return bom_encoding, "bom", len(bom)
    decided_by: DecidedBy = "header"
    encoding = header_encoding(content_type)
    if encoding is None and (wide := _xml_wide_encoding(body)) is not None:
        encoding, decided_by = wide, "xml"
    if encoding is None and (declared := declared_encoding(body)) is not None:
        encoding, decided_by = declared
    if encoding is None:
        encoding, decided_by = detected_encoding(body), "detection"
    return _wide_codec(encoding, body), decided_by, 0


def decode_document(body: bytes, content_type: str | None = None) -> DecodedText:
    """``body`` decoded in the WHATWG order (the module docstring); undecodable bytes become U+FFFD."""
    encoding, decided_by, bom_length = document_encoding(body, content_type)
    return DecodedText(to_unicode(body[bom_length:], encoding), encoding, decided_by)


def decode_text(body: bytes, content_type: str | None) -> str:
    """The page's text in the charset it is really in (BOM, header, XML prolog or ``<meta>``, detection:
    :func:`decode_document`), the same for pages, feeds, robots.txt and archived pages."""
    return decode_document(body, content_type).text


class StreamDecoder:
    """Text of a document read in pieces (a streamed sitemap or feed, never held whole): its charset is
    decided on its first :data:`STREAM_HEAD_BYTES` (or all of it, if shorter) as :func:`decode_document`
    decides it, then each piece is decoded as it comes (a character cut between two pieces is joined;
    undecodable bytes become U+FFFD). Until the head is in, ``decode`` returns nothing."""

    def __init__(self, content_type: str | None = None) -> None:
        self.content_type = content_type
        self.encoding: str | None = None
        self._decoder: codecs.IncrementalDecoder | None = None
        self._head = b""

    def decode(self, piece: bytes, final: bool = False) -> str:
        if self._decoder is None:
            self._head += piece
            if len(self._head) < STREAM_HEAD_BYTES and not final:
                return ""
            self.encoding, _, skip = document_encoding(self._head, self.content_type)
            errors = "w3lib_gb18030_replace" if self.encoding == "gb18030" else "replace"
            self._decoder = codecs.getincrementaldecoder(self.encoding)(errors)
            piece, self._head = self._head[skip:], b""
        return self._decoder.decode(piece, final)


