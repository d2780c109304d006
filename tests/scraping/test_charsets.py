"""The charset a document is really in: the WHATWG order (BOM, header, prolog or ``<meta>``, detection) and
the supersets browsers decode with, for pages, feeds, sitemaps and robots.txt alike."""

from __future__ import annotations

import base64
import codecs
import json
from pathlib import Path
from typing import Any

import pytest
from harvester.scraping.fetching import decode_text
from harvester.scraping.fetching.charsets import (
    DETECTION_BYTES,
    StreamDecoder,
    declared_encoding,
    decode_document,
    detected_encoding,
    encoding_for_label,
    header_encoding,
)

from tests.corpora import corpus_file

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit

FRENCH = "Crème brûlée à la maison — 12,50 € la part, déjà prête. Voilà une spécialité très appréciée."
JAPANESE = "東京の本屋で買った日本語の本です。価格は千二百円、送料は無料です。"
RUSSIAN = "Мы доставляем товары по всей России в течение трёх рабочих дней, оплата при получении."


def page(text: str) -> str:
    return (f"<!DOCTYPE html><html><head><title>{text[:20]}</title></head><body><h1>{text}</h1><p>{text}</p>"
            "</body></html>")


def same_codec(found: str, expected: str) -> bool:
    return codecs.lookup(found).name == codecs.lookup(expected).name


@pytest.mark.parametrize(("label", "codec"), [
    ("ISO-8859-1", "cp1252"), ("us-ascii", "cp1252"), ("latin1", "cp1252"), ("Shift_JIS", "cp932"),
    ("x-sjis", "cp932"), ("EUC-KR", "cp949"), ("gb2312", "gb18030"), ("GBK", "gb18030"), ("big5", "big5hkscs"),
    ("iso-8859-9", "cp1254"), ("tis-620", "cp874"), ("utf8", "utf-8"), ("UTF-32", "utf-32"),
])
def test_labels_mean_the_superset_a_browser_decodes_with(label: str, codec: str) -> None:
    assert same_codec(encoding_for_label(label), codec)


@pytest.mark.parametrize("label", ["utf-7", "bogus", "'utf-8'", "", "iso-2022-kr"])
def test_labels_nobody_may_use_mean_nothing(label: str) -> None:
    """UTF-7 and WHATWG's "replacement" labels spell markup in plain ASCII; a quoted or unknown label is none."""
    assert encoding_for_label(label) is None


@pytest.mark.parametrize(("header", "codec"), [
    ("text/html; charset=Shift_JIS", "cp932"), ('text/html; charset="utf-8"; q=1', "utf-8"),
    ("text/html; charset=utf-8, text/plain; charset=utf-16", "utf-8"), ("text/html", None),
    ("text/html; charset = utf-8", None), ('text/html; foo="bar; charset=utf-7"', None),
    ("text/html; charset=nonsense", None),
])
def test_the_header_is_read_by_the_mime_grammar(header: str, codec: str | None) -> None:
    found = header_encoding(header)
    assert (found is None and codec is None) or same_codec(found, codec)


def test_a_bom_wins_over_the_header_and_is_not_text() -> None:
    decoded = decode_document(codecs.BOM_UTF8 + FRENCH.encode(), "text/html; charset=iso-8859-1")
    assert decoded.text == FRENCH and decoded.decided_by == "bom"


def test_the_header_wins_over_the_meta() -> None:
    body = ('<meta charset="utf-8">' + FRENCH).encode("cp1252")
    decoded = decode_document(body, "text/html; charset=windows-1252")
    assert decoded.text.endswith(FRENCH) and decoded.decided_by == "header"


def test_an_xml_prolog_declares_a_feed_or_sitemap_charset() -> None:
    body = f'<?xml version="1.0" encoding="Shift_JIS"?><rss><title>{JAPANESE}</title></rss>'.encode("cp932")
    decoded = decode_document(body, "application/xml")
    assert JAPANESE in decoded.text and decoded.decided_by == "xml" and same_codec(decoded.encoding, "cp932")


def test_a_meta_past_the_first_kilobyte_is_still_honoured() -> None:
    body = ("<!--" + "x" * 3000 + '--><meta charset="iso-8859-2"><p>Zażółć gęślą jaźń</p>').encode("iso-8859-2")
    decoded = decode_document(body, "text/html")
    assert "Zażółć gęślą jaźń" in decoded.text and decoded.decided_by == "meta"


def test_a_meta_inside_an_attribute_is_not_a_declaration() -> None:
    """The WHATWG prescan skips attribute values; a regular expression over the text found this one."""
    assert declared_encoding(b'<p title="x>\n<meta charset=iso8859-2>">') is None


def test_a_meta_naming_utf16_means_utf8() -> None:
    assert declared_encoding(b'<meta charset="UTF-16LE">') == ("utf-8", "meta")


@pytest.mark.parametrize(("text", "charset"), [
    (FRENCH, "cp1252"), (JAPANESE, "shift_jis"), (JAPANESE, "euc-jp"), (JAPANESE, "iso-2022-jp"),
    (RUSSIAN, "cp1251"),
    ("Παράδοση γίνεται σε όλη την Ελλάδα μέσα σε τρεις εργάσιμες ημέρες από την παραγγελία.", "cp1253"),
])
def test_a_page_naming_no_charset_anywhere_is_detected(text: str, charset: str) -> None:
    """No header charset, no meta, no BOM: the bytes alone; decoding them as UTF-8 gave U+FFFD for each
    legacy byte."""
    html = page(text)
    assert decode_text(html.encode(charset), "text/html") == html


def test_ascii_is_windows_1252_and_valid_utf8_is_utf8() -> None:
    assert detected_encoding(b"<p>plain</p>") == "cp1252"
    assert detected_encoding(FRENCH.encode()) == "utf-8"


@pytest.mark.parametrize(("text", "charset"), [
    (RUSSIAN, "utf-8"), (RUSSIAN, "cp1251"), (FRENCH, "cp1252"), (JAPANESE, "shift_jis"),
])
def test_a_page_whose_first_quarter_megabyte_is_ascii_is_decoded_by_its_text_further_on(text: str,
                                                                                      charset: str) -> None:
    """Real pages start with hundreds of kilobytes of inline script: a page naming no charset whose first
    256 KB are ASCII is decided by its first non-ASCII bytes, wherever they are (one of the Zyte corpus's
    Russian product pages, UTF-8 with its first non-ASCII byte at 770 KB, was read as windows-1252)."""
    script = "<html><head><script>" + "var settings = {\"region\": \"unknown\", \"ready\": true};\n" * 6000
    page = (script + f"</script></head><body><h1>{text}</h1><p>{text}</p></body></html>").encode(charset)
    assert page[:DETECTION_BYTES].isascii()
    assert text in decode_text(page, "text/html")


def test_utf16_named_without_its_byte_order_is_told_by_its_zero_bytes() -> None:
    assert decode_document("hi".encode("utf-16-le"), "text/plain; charset=utf-16").text == "hi"
    assert decode_document("hi".encode("utf-16-be"), "text/plain; charset=utf-16").text == "hi"


def test_utf16_xml_without_a_bom_is_told_by_its_prolog() -> None:
    body = '<?xml version="1.0"?><urlset/>'.encode("utf-16-le")
    assert decode_document(body, None).text.startswith("<?xml")


def test_html5lib_encoding_suite() -> None:
    """html5lib-tests ``encoding/``: every case but those whose ``<meta>`` a script writes (only a script
    engine finds those; html5lib skips them too)."""
    cases = json.loads(corpus_file("encoding/html5lib-encoding-cases.json").read_text())
    wrong = [case["id"] for case in cases if not case["scripted"] and not same_codec(
        decode_document(base64.b64decode(case["data_b64"]), None).encoding,
        encoding_for_label(case["expected_encoding"]))]
    assert wrong == []


def realdata_bench(monkeypatch: pytest.MonkeyPatch) -> Any:
    """bench/realdata.py as a module (it holds the list of w3lib cases that contradict WHATWG, one place for
    the bench and these tests); it imports its sibling ``rig`` as a script does, so bench/ goes on the path."""
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("realdata_bench", ROOT / "bench" / "realdata.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_w3lib_cases_contradicting_whatwg_are_read_as_a_browser_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The six w3lib cases judged to contradict WHATWG (a ``<meta>`` after ``<body>``, a pragma without
    ``http-equiv=content-type``, ``< meta``): each is in the suite, and read as WHATWG's prescan and Chromium
    read it, not as w3lib expects."""
    bench = realdata_bench(monkeypatch)
    cases = json.loads(corpus_file("encoding/w3lib-encoding-cases.json").read_text())
    verdicts = [(case, verdict) for case in cases if (verdict := bench._contradiction(case)) is not None]
    assert len(verdicts) == len(bench.W3LIB_CONTRADICTING_WHATWG)
    for case, (_, whatwg) in verdicts:
        assert bench._as_whatwg_reads(case, whatwg), (case["line"], whatwg)
        assert not bench._as_whatwg_reads(case, case["expected"])  # truly a contradiction, not a case we miss


def test_w3lib_encoding_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    """w3lib's header, label and whole-document cases; its body-declaration cases but those that contradict
    WHATWG (``bench/realdata.py``'s ``W3LIB_CONTRADICTING_WHATWG``, where a browser decodes as we do)."""
    contradiction = realdata_bench(monkeypatch)._contradiction
    cases = json.loads(corpus_file("encoding/w3lib-encoding-cases.json").read_text())
    wrong = []
    for case in cases:
        kind, expected = case["kind"], case.get("expected")
        if kind == "http_content_type_encoding":
            found = header_encoding(case["input"])
        elif kind == "resolve_encoding":
            found = encoding_for_label(case["input"])
        elif kind == "html_body_declared_encoding":
            if contradiction(case) is not None:
                continue
            given = case["input"]
            declared = declared_encoding(given.encode("latin-1") if isinstance(given, str)
                                         else base64.b64decode(given["b64"]))
            found = declared[0] if declared else None
        else:
            if case["extra_kwargs"]:
                continue  # a parameter of w3lib's function (auto_detect_fun, default_encoding) we do not have
            body = base64.b64decode(case["body"]["b64"])
            text = decode_document(body, case["content_type_header"]).text
            wanted = case["expected_text"]
            if wanted is None:
                wanted = decode_document(body, f"text/html; charset={case['expected_encoding']}").text
            if text not in (wanted if isinstance(wanted, list) else [wanted]):
                wrong.append(case["line"])
            continue
        wanted_codec = encoding_for_label(expected) if expected else None
        both_none = found is None and wanted_codec is None
        if not (both_none or (found and wanted_codec and same_codec(found, wanted_codec))):
            wrong.append(case["line"])
    assert wrong == []


def test_a_document_read_in_pieces_is_decoded_as_a_whole_one() -> None:
    """A streamed sitemap or feed: the charset decided on the first piece, a character cut between pieces
    joined."""
    body = f'<?xml version="1.0" encoding="Shift_JIS"?><rss><title>{JAPANESE}</title></rss>'.encode("cp932")
    stream = StreamDecoder("application/xml")
    text = "".join(stream.decode(body[start:start + 7]) for start in range(0, len(body), 7)) + stream.decode(
        b"", final=True)
    assert text == body.decode("cp932") and same_codec(stream.encoding, "cp932")
    with_bom = StreamDecoder()
    assert with_bom.decode(codecs.BOM_UTF8 + FRENCH.encode()[:10]) == ""  # the head is not in yet
    assert with_bom.decode(FRENCH.encode()[10:], final=True) == FRENCH
