"""One sitemap file read as it streams in: ``<urlset>``, ``<sitemapindex>``, RSS 2.0, Atom 1.0, plain text (one
URL a line) and a robots.txt's ``Sitemap:`` lines, with memory at one entry whatever the file's size.

XML goes through lxml's pull parser with a parser target (SAX-style callbacks: no tree is built), so the format
and every defence are decided on the parser's own events, never on a scan of the bytes that a comment or a
read split in two could fool:

- the root element (its first ``start``) tells the format;
- a document type declaration is seen by the target's ``doctype()`` event wherever it stands. One that declares
  anything (an internal subset with entities, elements or attribute lists: how XML bombs and external entities
  work) refuses the file, as does an entity declaration the parser stops at; a plain one (``<!DOCTYPE urlset>``,
  or with a public or system id) is parsed with entities off, no DTD loaded and no network, as Scrapy does;
- blank lines and a byte order mark before the XML declaration are skipped (libxml2 refuses a declaration that
  is not the first thing; real sites send them).

Entries: a ``<url>`` or ``<sitemap>``'s ``<loc>``; an RSS ``<item>``'s ``<link>``, else its permalink ``<guid>``;
an Atom ``<entry>``'s first alternate link to a page (``rel`` absent or ``alternate``, an HTML type or none),
never a link of its ``<source>`` (the feed it was copied from), else its ``<id>`` when that is a URL. An entry
without a URL is counted (``without_url``), never silently lost.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from lxml import etree

__all__ = ["ROOTS", "SitemapDocument", "SitemapEntry", "SitemapKind", "SitemapParser", "is_robots_url",
           "parse_lastmod"]

SitemapKind = Literal["urlset", "index", "rss", "atom", "text", "robots", ""]
PROLOG_MAX_BYTES = 64 * 1024  # a root element must start within this much of the file
LEADING_BLANKS = b"\xef\xbb\xbf \t\r\n"  # a UTF-8 byte order mark and blank lines before the prolog
_SITEMAP_LINE = re.compile(r"^\s*site-?map\s*:\s*(\S+)", re.IGNORECASE | re.MULTILINE)
_YEAR_MONTH = re.compile(r"^(\d{4})(?:-(\d{2}))?$")
ENTRY_TAGS = {"urlset": "url", "index": "sitemap", "rss": "item", "atom": "entry"}
ROOTS: dict[str, SitemapKind] = {"urlset": "urlset", "sitemapindex": "index", "rss": "rss", "feed": "atom"}
PAGE_TYPES = ("", "text/html", "application/xhtml+xml")  # an Atom link to a page, not to its media
DOCTYPE_REFUSED = ("a document type declaration that declares entities or elements (an XML bomb or an external "
                   "entity?) is refused in a sitemap")


def is_robots_url(url: str) -> bool:
    return urlsplit(url).path == "/robots.txt"


def parse_lastmod(value: str | None) -> datetime | None:
    """A W3C datetime (``2024``, ``2024-03``, ``2024-03-05``, ``2024-03-05T10:30:00+02:00``, ``...Z``) or an
    RFC 2822 date (RSS), as an aware UTC datetime; None when absent or unreadable (the entry has no lastmod),
    a date past what a datetime holds once moved to UTC included (``9999-12-31T23:59:59-01:00``)."""
    text = (value or "").strip()
    if not text or len(text) > 64:
        return None
    moment: datetime | None = None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        if match := _YEAR_MONTH.match(text):
            try:
                moment = datetime(int(match.group(1)), int(match.group(2) or 1), 1)
            except ValueError:
                return None
        else:
            try:
                moment = parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
    if isinstance(moment, date) and not isinstance(moment, datetime):
        moment = datetime(moment.year, moment.month, moment.day)
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


@dataclass(slots=True)
class SitemapEntry:
    url: str
    lastmod: datetime | None = None


@dataclass
class SitemapDocument:
    """What one sitemap file gave: its pages or (an index) its sitemaps, and why it was cut or refused."""

    kind: SitemapKind = ""
    pages: list[SitemapEntry] = field(default_factory=list)
    sitemaps: list[SitemapEntry] = field(default_factory=list)
    entries: int = 0
    without_url: int = 0  # entries (an RSS item, an Atom entry) that named no URL
    decoded_bytes: int = 0
    cut: str = ""  # the file was read only in part (a cap): the entries read are used
    refused: str = ""  # nothing of the file is used: a DOCTYPE, not a sitemap, malformed XML

    @property
    def problem(self) -> str:
        return self.refused or self.cut


class SitemapParser:
    """Fed decoded bytes as they arrive; keeps one entry in memory at a time. ``feed`` returns False
    once nothing more should be read (a cap was reached, or the document was refused)."""

    def __init__(self, url: str, max_urls: int) -> None:
        self.url = url
        self.max_urls = max_urls
        self.document = SitemapDocument()
        self.robots = is_robots_url(url)
        self.doctype = False  # the parser met a document type declaration
        self._mode: Literal["", "xml", "text"] = ""
        self._head = b""  # the first bytes, until the format is known
        self._prolog = b""  # what the XML parser was fed before the root element
        self._text_tail = b""
        self._parser: Any = None
        self._root_seen = False

    # -- feeding ---------------------------------------------------------------------------------
    def feed(self, data: bytes) -> bool:
        if self.document.refused or self.document.cut:
            return False
        self.document.decoded_bytes += len(data)
        try:
            return self._feed(data)
        except _EnoughRead:
            return False
        except Exception as error:  # what a site sent broke the parser: this file is refused, never its batch
            self._refuse(f"unreadable sitemap: {type(error).__name__}: {error}"[:300])
            return False

    def _feed(self, data: bytes) -> bool:
        if not self._mode:
            self._head += data
            stripped = self._head.lstrip(LEADING_BLANKS)
            if not stripped:
                return len(self._head) <= PROLOG_MAX_BYTES or self._refuse("an empty file")
            self._mode = "xml" if stripped.startswith(b"<") and not self.robots else "text"
            data, self._head = (stripped if self._mode == "xml" else self._head), b""
            if self._mode == "text":
                self.document.kind = "robots" if self.robots else "text"
        if self._mode == "text":
            return self._feed_text(data)
        return self._feed_xml(data)

    def close(self) -> SitemapDocument:
        if self._mode == "text" and self._text_tail and not self.document.cut:
            self._text_line(self._text_tail.decode("utf-8", "replace"))
        elif self._mode == "xml" and not self.document.problem:
            try:
                self._parser.close()
            except _EnoughRead:
                pass
            except etree.XMLSyntaxError as error:
                self._broken(error)
            if not self._root_seen and not self.document.problem:
                self._refuse("not a sitemap: no root element")
        elif not self._mode and not self.document.problem:
            self._refuse("an empty file")
        return self.document

    def cut(self, reason: str) -> None:
        if not self.document.problem:
            self.document.cut = reason

    def _refuse(self, reason: str) -> bool:
        if not self.document.problem:
            self.document.refused = reason
        return False

    # -- plain text and robots.txt ---------------------------------------------------------------
    def _feed_text(self, data: bytes) -> bool:
        lines = (self._text_tail + data).split(b"\n")
        self._text_tail = lines.pop()
        if len(self._text_tail) > 64 * 1024:  # one line that long is not a URL
            self._text_tail = b""
        return all(self._text_line(raw.decode("utf-8", "replace")) for raw in lines)

    def _text_line(self, line: str) -> bool:
        if self.robots:
            match = _SITEMAP_LINE.match(line)
            return self._add(match.group(1), None, index=True) if match else True
        line = line.strip()
        if line.startswith(("http://", "https://")):
            return self._add(line, None, index=False)
        return True

    # -- XML ---------------------------------------------------------------------------------------
    def _feed_xml(self, data: bytes) -> bool:
        if self._parser is None:  # a target parser builds no tree: memory holds one entry's text
            self._parser = etree.XMLParser(target=_EntryTarget(self), resolve_entities=False, no_network=True,
                                           load_dtd=False, huge_tree=False)
        if not self._root_seen:
            self._prolog += data
        try:
            self._parser.feed(data)
        except etree.XMLSyntaxError as error:
            self._broken(error)
            return False
        if not self._root_seen:
            if len(self._prolog) > PROLOG_MAX_BYTES:
                return self._refuse(f"not a sitemap: no root element in its first {PROLOG_MAX_BYTES} bytes")
        else:
            self._prolog = b""
        return not self.document.problem

    def root(self, tag: str) -> str:
        """The root element's name tells the format (the entries' tag, returned); a DOCTYPE before it must be a
        plain one. Raises :class:`_EnoughRead` when the file is refused."""
        name = tag.rpartition("}")[2]
        kind = ROOTS.get(name)
        if self.doctype and _declares_anything(self._prolog):
            self._refuse(DOCTYPE_REFUSED)
        elif kind is None:
            self._refuse(f"not a sitemap: the root element is <{name[:40]}>")
        if self.document.problem:
            raise _EnoughRead
        self.document.kind, self._root_seen = kind, True
        return ENTRY_TAGS[kind]

    def _broken(self, error: Exception) -> None:
        if self.doctype and not self._root_seen:  # libxml2 stops at an entity declaration in a target parse
            self._refuse(DOCTYPE_REFUSED)
        elif self.document.entries:  # a file cut short by the server: keep what was read
            self.cut(f"malformed XML after {self.document.entries} entries: {error}"[:300])
        else:
            self._refuse(f"not a sitemap: malformed XML: {error}"[:300])

    def _add(self, url: str, lastmod: str | None, *, index: bool) -> bool:
        if self.document.entries >= self.max_urls:
            self.cut(f"more than {self.max_urls} entries: the rest is not read")
            return False
        self.document.entries += 1
        entry = SitemapEntry(url, parse_lastmod(lastmod))
        (self.document.sitemaps if index else self.document.pages).append(entry)
        return True


def _declares_anything(prolog: bytes) -> bool:
    """Whether the document type declaration at the head of ``prolog`` (the bytes up to the root element) has an
    internal subset that declares something (entities, elements, attribute lists, notations), as lxml's own
    document reads it back (entities off, no DTD, no network): its entity and element declarations, and the
    declaration as libxml2 writes it, with ``[...]`` only when the subset holds a declaration."""
    reader = etree.XMLPullParser(events=("start",), resolve_entities=False, no_network=True, load_dtd=False,
                                 huge_tree=False)
    with contextlib.suppress(etree.XMLSyntaxError):  # what follows the root's start tag may be cut mid-way:
        reader.feed(prolog)  # the events read before it still stand
    for _event, element in reader.read_events():
        tree = element.getroottree()
        subset = tree.docinfo.internalDTD
        if subset is None:
            return False
        if next(subset.iterelements(), None) is not None or next(subset.iterentities(), None) is not None:
            return True
        before = b"".join(etree.tostring(node) for node in reversed(list(element.itersiblings(preceding=True))))
        written = etree.tostring(tree)[len(before):].lstrip()  # the comments and PIs before the DOCTYPE skipped
        return written.startswith(tree.docinfo.doctype.encode()[:-1] + b" [")
    return True  # no root element read back: a subset it could not parse is refused too


class _EnoughRead(Exception):
    """Raised out of the parser's callbacks when a cap is reached: nothing more is read."""


class _EntryTarget:
    """lxml's parser target (SAX-style callbacks): one entry at a time, its text capped."""

    FIELDS = frozenset({"loc", "link", "lastmod", "updated", "pubDate", "guid", "id"})
    TEXT_CAP = 8192  # characters kept of one field: a URL or a date is far shorter

    def __init__(self, parser: SitemapParser) -> None:
        self.parser = parser
        self.entry_tag = ""  # known at the root element
        self.kind = ""
        self.in_entry = False
        self.in_source = 0  # inside an Atom entry's <source>: the feed it came from, not the entry
        self.field: str | None = None
        self.text: list[str] = []
        self.size = 0
        self.url = self.fallback = ""
        self.permalink = True
        self.lastmod: str | None = None

    def doctype(self, name: str, public_id: str | None, system_url: str | None) -> None:
        self.parser.doctype = True

    def start(self, tag: str, attrib: Any) -> None:
        if not self.entry_tag:
            self.entry_tag = self.parser.root(tag)
            self.kind = self.parser.document.kind
            return
        name = tag.rpartition("}")[2]
        if name == self.entry_tag:
            self.in_entry, self.url, self.fallback, self.lastmod, self.in_source = True, "", "", None, 0
        elif not self.in_entry:
            return
        elif (name == "source" and self.kind == "atom") or self.in_source:
            self.in_source += name == "source"
        elif self.kind == "atom" and name == "link":
            rel, kind = attrib.get("rel", "alternate"), (attrib.get("type") or "").split(";")[0].strip().lower()
            if rel == "alternate" and kind in PAGE_TYPES and not self.url:
                self.url = (attrib.get("href") or "").strip()
        elif name in self.FIELDS:
            self.field, self.text, self.size = name, [], 0
            if name == "guid":
                self.permalink = attrib.get("isPermaLink", "true").strip().lower() != "false"

    def data(self, text: str) -> None:
        if self.field is not None and self.size < self.TEXT_CAP:
            self.text.append(text)
            self.size += len(text)

    def end(self, tag: str) -> None:
        name = tag.rpartition("}")[2]
        if self.in_source:
            self.in_source -= name == "source"
        elif self.field is not None and name == self.field:
            self._field_ends(name, "".join(self.text)[: self.TEXT_CAP].strip())
        elif name == self.entry_tag and self.in_entry:
            self.in_entry = False
            url = self.url or self.fallback
            if not url:
                self.parser.document.without_url += 1
            elif not self.parser._add(url, self.lastmod, index=self.kind == "index"):
                raise _EnoughRead

    def _field_ends(self, name: str, value: str) -> None:
        self.field = None
        if name in ("loc", "link"):
            self.url = self.url or value
        elif name in ("guid", "id"):  # an RSS permalink, an Atom id that is a URL: used when no link is given
            usable = value.startswith(("http://", "https://")) and (name == "id" or self.permalink)
            self.fallback = self.fallback or (value if usable else "")
        else:
            self.lastmod = value

    def comment(self, text: str) -> None:
        return None

    def close(self) -> None:
        return None
