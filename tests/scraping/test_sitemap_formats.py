"""Sitemaps and feeds as real sites write them, and the DOCTYPE defence decided on the parser's own events:
blank lines and a byte order mark before the prolog are read; a plain DOCTYPE is parsed with entities off, no DTD
loaded and no network; one that declares entities or elements is refused wherever it stands, a comment naming
``<urlset`` before it or a read split across it included; Atom entries with several links give their page, not
their source feed's; RSS items with only a permalink guid count; a sitemap speaks for its own site only.
Scrapy's sitemap cases (``../shared/corpora/sitemaps``) run when the corpus is there."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from harvester.config.model import SourceConfig
from harvester.scraping.discovery.sitemap_parser import DOCTYPE_REFUSED
from harvester.scraping.discovery.sitemaps import (
    SitemapDocument,
    SitemapFetchResult,
    SitemapParser,
    sitemap_discovery,
)
from harvester.settings import REPOSITORY_ROOT
from pydantic import ValidationError

from tests.corpora import corpora_folder
from tests.fixtures.demo_site import demo_source_document

pytestmark = pytest.mark.unit


SCRAPY_CASES = (corpora_folder() or REPOSITORY_ROOT / "absent") / "sitemaps" / "scrapy-sitemap-cases.json"
NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def parse(body: bytes, url: str = "http://shop.example/sitemap.xml", step: int | None = None) -> SitemapDocument:
    """``body`` fed as the network would hand it: whole, or ``step`` bytes a read."""
    parser = SitemapParser(url, 1000)
    step = step or len(body) or 1
    for start in range(0, len(body), step):
        if not parser.feed(body[start:start + step]):
            break
    return parser.close()


def urls(document: SitemapDocument) -> list[str]:
    return [entry.url for entry in document.pages + document.sitemaps]


URLSET = f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{NS}"><url><loc>http://shop.example/p/1</loc>' \
         '</url></urlset>'


@pytest.mark.parametrize("head", [b"\n\n", b"\xef\xbb\xbf", b"\xef\xbb\xbf\r\n  \n", b"  \t\n"])
@pytest.mark.parametrize("step", [None, 1, 3])
def test_blank_lines_and_a_byte_order_mark_before_the_prolog_are_read(head: bytes, step: int | None) -> None:
    document = parse(head + URLSET.encode(), step=step)
    assert document.kind == "urlset" and not document.problem, document.problem
    assert urls(document) == ["http://shop.example/p/1"]


def test_a_plain_doctype_is_parsed_with_entities_off_and_nothing_loaded(site) -> None:
    """A DOCTYPE with a system id on a real server: the file is read, the DTD never fetched, an undeclared
    entity left unexpanded."""
    site.route("/sitemap.dtd", text='<!ENTITY secret "leaked">', content_type="application/xml-dtd")
    for doctype in (f'<!DOCTYPE urlset SYSTEM "{site.url}/sitemap.dtd">',
                    f'<!DOCTYPE urlset PUBLIC "-//shop//sitemap" "{site.url}/sitemap.dtd">', "<!DOCTYPE urlset>"):
        body = f'<?xml version="1.0"?>\n{doctype}\n<urlset xmlns="{NS}"><url><loc>http://shop.example/p/1</loc>' \
               '</url><url><loc>http://shop.example/p/&secret;</loc></url></urlset>'
        for step in (None, 7):
            document = parse(body.encode(), step=step)
            assert document.kind == "urlset", (doctype, document.problem)
            assert urls(document)[0] == "http://shop.example/p/1" and "leaked" not in "".join(urls(document))
    assert site.paths() == []


BILLION_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
                  + "".join(f'<!ENTITY lol{n} "{("&lol" + (str(n - 1) if n > 1 else "") + ";") * 10}">'
                            for n in range(1, 10))
                  + f']><urlset xmlns="{NS}"><url><loc>http://shop.example/&lol9;</loc></url></urlset>')


@pytest.mark.parametrize("body", [
    BILLION_LAUGHS,
    f'<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><urlset xmlns="{NS}"><url><loc>'
    'http://shop.example/&xxe;</loc></url></urlset>',
    f'<!DOCTYPE urlset [<!ELEMENT urlset ANY>]><urlset xmlns="{NS}"><url><loc>http://shop.example/1</loc></url>'
    '</urlset>',
    f'<!DOCTYPE urlset [<!ATTLIST url priority CDATA "1">]><urlset xmlns="{NS}"><url><loc>http://shop.example/1'
    '</loc></url></urlset>',
], ids=["billion_laughs", "external_entity", "element_declaration", "attribute_list"])
@pytest.mark.parametrize("step", [None, 1, 5])
def test_a_doctype_that_declares_anything_is_refused(body: str, step: int | None) -> None:
    document = parse(body.encode(), step=step)
    assert document.refused == DOCTYPE_REFUSED and urls(document) == []


@pytest.mark.parametrize("subset", ['<!ENTITY a "b">', "<!ELEMENT urlset ANY>"])
@pytest.mark.parametrize("step", [None, 1, 4, 17])
def test_a_doctype_after_a_comment_naming_urlset_is_still_seen_whatever_the_reads(subset: str, step: int) -> None:
    """A byte scan took ``<urlset`` inside the comment for the root and stopped looking for a DOCTYPE, so a
    declaration in a later read slipped past the refusal."""
    body = f'<?xml version="1.0"?><!-- <urlset --><!DOCTYPE urlset [{subset}]><urlset xmlns="{NS}"><url>' \
           '<loc>http://shop.example/1</loc></url></urlset>'
    document = parse(body.encode(), step=step)
    assert document.refused == DOCTYPE_REFUSED, document.problem


ATOM = """<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>
<link rel="self" href="http://shop.example/feed.atom"/>
<entry><title>copied</title>
  <source><title>another feed</title><link href="http://elsewhere.example/feed"/></source>
  <link rel="self" href="http://shop.example/entries/1.atom"/>
  <link rel="enclosure" type="audio/mpeg" href="http://shop.example/1.mp3"/>
  <link rel="alternate" type="application/pdf" href="http://shop.example/1.pdf"/>
  <link rel="alternate" type="text/html" href="http://shop.example/item/1"/>
  <link href="http://shop.example/item/1-again"/></entry>
<entry><title>no link</title><id>http://shop.example/item/2</id><updated>2024-01-02T00:00:00Z</updated></entry>
<entry><title>nothing</title><id>urn:uuid:1225c695-cfb8-4ebb-aaaa-80da344efa6a</id></entry>
</feed>"""


def test_atom_entries_with_several_links_give_their_own_page() -> None:
    document = parse(ATOM.encode(), "http://shop.example/feed.atom")
    assert document.kind == "atom"
    assert urls(document) == ["http://shop.example/item/1", "http://shop.example/item/2"]
    assert document.pages[1].lastmod == datetime(2024, 1, 2, tzinfo=UTC)
    assert document.entries == 2 and document.without_url == 1


def test_rss_items_count_with_their_permalink_guid_and_without_a_url() -> None:
    body = """<?xml version="1.0"?><rss version="2.0"><channel><link>http://shop.example/</link>
<item><link>http://shop.example/item/1</link><guid>http://shop.example/?p=1</guid></item>
<item><guid>http://shop.example/item/2</guid></item>
<item><guid isPermaLink="false">http://shop.example/item/3</guid></item>
<item><title>no address at all</title></item></channel></rss>"""
    document = parse(body.encode(), "http://shop.example/rss.xml")
    assert urls(document) == ["http://shop.example/item/1", "http://shop.example/item/2"]
    assert document.entries == 2 and document.without_url == 2


def discovered(document_body: str, url: str, **input_fields):
    document = demo_source_document("http://shop.example", input={"seeds": ["http://shop.example/"],
                                                                 "sitemaps": [url], **input_fields})
    document["listing"]["follow"] = r"^https?://"
    source = SourceConfig.model_validate(document)
    fetch = SitemapFetchResult(url, "ok", final_url=url, status=200, document=parse(document_body.encode(), url))
    return sitemap_discovery(source, fetch, 2000)


OFF_SITE = f"""<?xml version="1.0"?><urlset xmlns="{NS}">
<url><loc>http://shop.example/p/1</loc><lastmod>2024-01-01</lastmod></url>
<url><loc>https://www.shop.example/p/2</loc><lastmod>2024-01-01</lastmod></url>
<url><loc>http://elsewhere.example/p/3</loc><lastmod>2099-01-01</lastmod></url></urlset>"""
OFF_SITE_INDEX = f"""<?xml version="1.0"?><sitemapindex xmlns="{NS}">
<sitemap><loc>http://shop.example/s1.xml</loc></sitemap><sitemap><loc>http://elsewhere.example/s2.xml</loc></sitemap>
</sitemapindex>"""


def test_a_sitemap_speaks_for_its_own_site_only() -> None:
    pages = discovered(OFF_SITE, "http://shop.example/sitemap.xml")
    assert pages.details == ["http://shop.example/p/1", "https://www.shop.example/p/2"]
    assert pages.ignored.get("off_site") == 1 and set(pages.lastmod) == set(pages.details)
    index = discovered(OFF_SITE_INDEX, "http://shop.example/index.xml")
    assert index.listings == ["http://shop.example/s1.xml"] and index.ignored.get("off_site") == 1


def test_a_source_may_keep_other_sites_entries_but_never_believes_their_lastmod() -> None:
    pages = discovered(OFF_SITE, "http://shop.example/sitemap.xml", sitemaps_other_sites=True)
    assert "http://elsewhere.example/p/3" in pages.details and "off_site" not in pages.ignored
    assert "http://elsewhere.example/p/3" not in pages.lastmod and "http://shop.example/p/1" in pages.lastmod
    index = discovered(OFF_SITE_INDEX, "http://shop.example/index.xml", sitemaps_other_sites=True)
    assert index.listings == ["http://shop.example/s1.xml", "http://elsewhere.example/s2.xml"]


def test_sitemaps_other_sites_without_sitemaps_is_refused_naming_the_field() -> None:
    document = demo_source_document("http://shop.example", input={"seeds": ["http://shop.example/"],
                                                                 "sitemaps_other_sites": True})
    with pytest.raises(ValidationError, match="sitemaps_other_sites"):
        SourceConfig.model_validate(document)


# -- Scrapy's sitemap cases -----------------------------------------------------------------------------
def scrapy_cases() -> list[dict]:
    if not SCRAPY_CASES.exists():
        return []
    return [case for case in json.loads(SCRAPY_CASES.read_text()) if case["kind"] == "sitemap_parse"]


# Where Harvester parts from Scrapy on purpose: Scrapy parses a DOCTYPE that declares an external entity with
# entities off; Harvester refuses any DOCTYPE that declares something (the XML-bomb defence).
REFUSED_ON_PURPOSE = {"tests/test_utils_sitemap.py::test_xml_entity_expansion"}


@pytest.mark.skipif(not SCRAPY_CASES.exists(), reason="../shared/corpora is not beside this clone")
@pytest.mark.parametrize("step", [None, 3])
def test_scrapys_sitemap_cases(step: int | None) -> None:
    cases = scrapy_cases()
    assert len(cases) == 11
    passed, failed = [], []
    for case in cases:
        body = base64.b64decode(case["body_b64"]) if case.get("body_b64") else case["body_text"].encode()
        document = parse(body, "http://www.example.com/sitemap.xml", step)
        expected = [entry["loc"].strip() for entry in case["expected_entries"]]
        got = [url.strip() for url in urls(document)]
        (passed if got == expected else failed).append(case["test"])
        if case["test"] in REFUSED_ON_PURPOSE:
            assert document.refused == DOCTYPE_REFUSED
    assert set(failed) == REFUSED_ON_PURPOSE, failed
    assert len(passed) == 10  # 9 of 11 before: blank lines before <?xml refused the whole file

