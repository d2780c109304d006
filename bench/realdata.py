"""Formats as real sites write them, scored against public conformance suites and real text.

- ``charset_exact_share``: the share of the html5lib-tests ``encoding/`` cases and w3lib's encoding cases
  (``../shared/corpora/encoding``) that Harvester's decoding (``harvester.scraping.fetching.charsets``) gets
  exactly right (goal 1.0). A html5lib case is right when the charset chosen is the expected one (through
  WHATWG's labels and supersets); a w3lib ``html_to_unicode`` case when the text is the expected text (or the
  body decoded with the expected charset); its header, body-declaration and label cases when the charset
  is the expected one. Left out, and counted as ``charset_cases_not_applicable``: html5lib's ``scripted``
  cases (a ``<meta>`` written by ``document.write``: only a script engine finds it; html5lib skips them too)
  and w3lib cases of a parameter our decoding does not have (``auto_detect_fun``, ``default_encoding``).
  The cases missed are listed in ``charset_misses``. w3lib cases that contradict WHATWG's encoding sniffing
  (:data:`W3LIB_CONTRADICTING_WHATWG`: a browser reads those bytes otherwise, and html5lib's suite pins the same
  rule where it has such a case) are scored apart: ``charset_contradicting_cases`` how many,
  ``charset_contradicting_as_whatwg_share`` the share we read as WHATWG (and Chromium) read them.
- ``charset_undeclared_exact_share``: real text (the gettext catalogues under ``/usr/share/locale``, the
  translations of the machine's own programs, in many languages) written into HTML pages in the legacy
  charsets each language was written in, with no charset anywhere (no header, no ``<meta>``, no BOM), then
  decoded: the share whose text comes back exactly (goal >= 0.95). ``charset_undeclared_pages`` says how
  many pages, ``charset_undeclared_misses`` which charsets were missed (page, expected, decoded as).
- ``robots_google_share``: the share of Google's robots.txt cases (``../shared/corpora/robots``, kind
  ``allowed``) that ``harvester.scraping.fetching.robots`` answers as Google's parser does (goal 1.0).
- ``block_detect_cpu_ms_per_page``: the block markers' CPU per page on the demo's product pages, and its
  share of ``process_page``'s CPU (:func:`block_detection_figures`).

Usage: .venv/bin/python bench/realdata.py [--smoke]   (``--smoke``: a few cases of each, for CI)
Prints one JSON object on its last line. Without ``../shared`` the suites' keys are null.
"""

from __future__ import annotations

import argparse
import base64
import codecs
import gettext
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "include"), str(ROOT / "demo")]

from harvester.scraping.fetching.charsets import (  # noqa: E402  (the path above first)
    declared_encoding,
    decode_document,
    encoding_for_label,
    header_encoding,
)
from harvester.scraping.fetching.robots import RobotsRules  # noqa: E402  (the path above first)
from rig import shared_corpora  # noqa: E402  (the bench folder is the script's own)

# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "bench", "smoke", "charset_exact_share", "charset_undeclared_exact_share", "robots_google_share",
    "block_detect_cpu_ms_per_page", "block_detect_share", "charset_contradicting_cases",
    "charset_contradicting_as_whatwg_share",
)


CORPORA = shared_corpora()
LOCALES = Path("/usr/share/locale")
# language catalogue -> the legacy charsets pages in that language were written in
LEGACY_CHARSETS = {
    "fr": ["cp1252", "iso-8859-15"], "de": ["cp1252", "iso-8859-1"], "es": ["cp1252"], "pt": ["cp1252"],
    "it": ["iso-8859-1"], "nl": ["cp1252"], "da": ["iso-8859-1"], "sv": ["cp1252"], "fi": ["iso-8859-15"],
    "pl": ["cp1250", "iso-8859-2"], "cs": ["cp1250", "iso-8859-2"], "hu": ["cp1250", "iso-8859-2"],
    "sk": ["cp1250"], "ro": ["iso-8859-16"], "hr": ["cp1250"], "sl": ["iso-8859-2"],
    "ru": ["cp1251", "koi8-r", "iso-8859-5"], "uk": ["cp1251", "koi8-u"], "bg": ["cp1251"], "sr": ["cp1251"],
    "el": ["cp1253", "iso-8859-7"], "tr": ["cp1254", "iso-8859-9"], "he": ["cp1255", "iso-8859-8"],
    "ar": ["cp1256", "iso-8859-6"], "fa": ["cp1256"], "lt": ["cp1257", "iso-8859-13"], "lv": ["cp1257"],
    "et": ["iso-8859-15"], "vi": ["cp1258"], "th": ["cp874", "tis-620"],
    "ja": ["shift_jis", "euc-jp", "iso-2022-jp"], "zh_CN": ["gb2312", "gbk", "gb18030"],
    "zh_TW": ["big5"], "ko": ["euc-kr"],
}
PAGE_TEXT_CHARACTERS = 1500  # about a product page's visible text


# w3lib's html_body_declared_encoding cases whose expectation contradicts WHATWG's prescan (HTML section
# 13.2.3.2), each checked in Chromium 2026-12-05 (the bytes served as text/html with no charset; its
# document.characterSet is WHATWG's answer): (test, line, the input's first bytes) -> why, and what WHATWG reads.
W3LIB_CONTRADICTING_WHATWG: dict[tuple[str, int, bytes], tuple[str, str | None]] = {
    ("TestRequestEncoding.test_html_body_declared_encoding", 158, b"\n            <head></head><body>"):
        ("w3lib stops at <body>; the prescan does not (Chromium: UTF-8 from the <meta> after <body>)", "utf-8"),
    ("TestRequestEncoding.test_html_body_declared_encoding_unicode", 196, b"\n            <head></head><body>"):
        ("w3lib stops at <body>; the prescan does not (Chromium: UTF-8 from the <meta> after <body>)", "utf-8"),
    ("TestRequestEncoding.test_html_body_declared_encoding", 168, b'<meta http-equiv="Fake-Content-Type-Header"'):
        ("a content charset counts only with http-equiv=content-type (html5lib tests1.dat #16, #17; Chromium: "
         "windows-1252)", None),
    ("TestRequestEncoding.test_html_body_declared_encoding_unicode", 206, b'<meta http-equiv="Fake-Content-Type-'):
        ("a content charset counts only with http-equiv=content-type (html5lib tests1.dat #16, #17; Chromium: "
         "windows-1252)", None),
    ("TestRequestEncoding.test_html_body_declared_encoding", 174, b'<meta httpequiv="ContentType"'):
        ("no http-equiv attribute at all, so no pragma (html5lib tests1.dat #16, #17; Chromium: windows-1252)",
         None),
    ("TestRequestEncoding.test_html_body_declared_encoding[utf8_fragments]", 21, b" bad html still supported < meta"):
        ("'< meta' is text, not a tag, to the prescan and the tokenizer (Chromium: windows-1252)", None),
}


def _declared_body(case: dict[str, Any]) -> bytes:
    """The body of a w3lib ``html_body_declared_encoding`` case (text as Latin-1 bytes, or base64)."""
    given = case["input"]
    return given.encode("latin-1") if isinstance(given, str) else base64.b64decode(given["b64"])


def _contradiction(case: dict[str, Any]) -> tuple[str, str | None] | None:
    """Why a w3lib case contradicts WHATWG and what WHATWG reads, if it is one of those."""
    if case.get("kind") != "html_body_declared_encoding":
        return None
    body = _declared_body(case)
    for (test, line, start), verdict in W3LIB_CONTRADICTING_WHATWG.items():
        if case["test"] == test and case["line"] == line and body.startswith(start):
            return verdict
    return None


def _as_whatwg_reads(case: dict[str, Any], whatwg: str | None) -> bool:
    declared = declared_encoding(_declared_body(case))
    return _equal_codecs(declared[0] if declared else None, whatwg)


def _equal_codecs(found: str | None, expected: str | None) -> bool:
    """Both None, or the same codec once the expected label is read as a browser reads it."""
    if found is None or expected is None:
        return found is None and expected is None
    wanted = encoding_for_label(expected) or expected
    try:
        return codecs.lookup(found).name == codecs.lookup(wanted).name
    except LookupError:
        return False


def _html5lib_case(case: dict[str, Any]) -> bool | None:
    if case["scripted"]:
        return None
    decoded = decode_document(base64.b64decode(case["data_b64"]), None)
    return _equal_codecs(decoded.encoding, case["expected_encoding"])


def _w3lib_case(case: dict[str, Any]) -> bool | None:
    kind = case["kind"]
    if kind == "http_content_type_encoding":
        return _equal_codecs(header_encoding(case["input"]), case["expected"])
    if kind == "resolve_encoding":
        return _equal_codecs(encoding_for_label(case["input"]), case["expected"])
    if kind == "html_body_declared_encoding":
        declared = declared_encoding(_declared_body(case))
        return _equal_codecs(declared[0] if declared else None, case["expected"])
    if case["extra_kwargs"]:
        return None
    body = base64.b64decode(case["body"]["b64"])
    decoded = decode_document(body, case["content_type_header"])
    expected_text = case["expected_text"]
    if expected_text is not None:
        return decoded.text in (expected_text if isinstance(expected_text, list) else [expected_text])
    return decoded.text == decode_document(body, f"text/html; charset={case['expected_encoding']}").text


def charset_suite_figures(smoke: bool) -> dict[str, Any]:
    folder = CORPORA / "encoding"
    if not folder.is_dir():  # a user's clone: every key printed, with nothing measured
        return {"charset_exact_share": None, "charset_contradicting_cases": None,
                "charset_contradicting_as_whatwg_share": None}
    results: list[tuple[str, bool | None]] = []
    contradicting: list[bool] = []
    for name, judge in (("html5lib-encoding-cases.json", _html5lib_case), ("w3lib-encoding-cases.json", _w3lib_case)):
        cases = json.loads((folder / name).read_text())
        for case in cases[:: 8 if smoke else 1]:
            if (verdict := _contradiction(case)) is not None:
                contradicting.append(_as_whatwg_reads(case, verdict[1]))
                continue
            label = case.get("id") or f"w3lib {case['test']} line {case['line']}"
            results.append((label, judge(case)))
    judged = [(label, right) for label, right in results if right is not None]
    return {"charset_exact_share": round(sum(right for _, right in judged) / len(judged), 4),
            "charset_cases": len(judged), "charset_cases_not_applicable": len(results) - len(judged),
            "charset_misses": [label for label, right in judged if not right],
            "charset_contradicting_cases": len(contradicting),
            "charset_contradicting_as_whatwg_share":
                round(sum(contradicting) / len(contradicting), 4) if contradicting else None}


def _catalogue_texts(language: str) -> list[str]:
    """The translated messages of a language's catalogues, in a fixed order (file names sorted)."""
    folder = LOCALES / language / "LC_MESSAGES"
    texts: list[str] = []
    for path in sorted(folder.glob("*.mo")) if folder.is_dir() else []:
        try:
            with path.open("rb") as file:
                catalogue = gettext.GNUTranslations(file)
        except (OSError, UnicodeDecodeError):
            continue
        texts += [text for key, text in sorted(catalogue._catalog.items(), key=str)
                  if isinstance(text, str) and key and len(text) > 12]
    return texts


def _legacy_pages(texts: list[str], charset: str, pages: int) -> list[tuple[str, bytes]]:
    """Pages of ``PAGE_TEXT_CHARACTERS`` of the messages ``charset`` can write, as a product page lays out
    text (a title, paragraphs, a table), encoded in ``charset`` and declaring nothing."""
    writable = []
    for text in texts:
        try:
            text.encode(charset)
        except UnicodeEncodeError:
            continue
        writable.append(text.replace("<", " ").replace("&", " "))
    built: list[tuple[str, bytes]] = []
    position = 0
    for _ in range(pages):
        chosen: list[str] = []
        while sum(map(len, chosen)) < PAGE_TEXT_CHARACTERS and position < len(writable):
            chosen.append(writable[position])
            position += 1
        if sum(map(len, chosen)) < PAGE_TEXT_CHARACTERS // 2:
            break
        rows = "".join(f"<tr><th>{index}</th><td>{text}</td></tr>" for index, text in enumerate(chosen[2:6]))
        paragraphs = "".join(f"<p>{text}</p>" for text in chosen[6:])
        html = (f"<!DOCTYPE html><html><head><title>{chosen[0]}</title></head><body><h1>{chosen[1]}</h1>"
                f"<table>{rows}</table>{paragraphs}</body></html>")
        built.append((html, html.encode(charset)))
    return built


def undeclared_figures(smoke: bool) -> dict[str, Any]:
    if not LOCALES.is_dir():
        return {"charset_undeclared_exact_share": None}
    pages_per_charset = 1 if smoke else 4
    right = total = 0
    misses: list[str] = []
    started = time.process_time()
    for language, charsets in LEGACY_CHARSETS.items():
        texts = _catalogue_texts(language)
        for charset in charsets:
            for index, (html, body) in enumerate(_legacy_pages(texts, charset, pages_per_charset)):
                decoded = decode_document(body, "text/html")
                total += 1
                if decoded.text == html:
                    right += 1
                else:
                    misses.append(f"{language}#{index} {charset} as {decoded.encoding}")
    return {"charset_undeclared_exact_share": round(right / total, 4) if total else None,
            "charset_undeclared_pages": total, "charset_undeclared_misses": misses,
            "charset_undeclared_cpu_ms_per_page": round(1000 * (time.process_time() - started) / max(total, 1), 2)}


def robots_figures(smoke: bool) -> dict[str, Any]:
    """Google's robots.txt cases of kind ``allowed``: each robots.txt decoded as the fetcher decodes it and read
    by :class:`~harvester.scraping.fetching.robots.RobotsRules`; the share answered as Google's parser does."""
    path = CORPORA / "robots" / "google-robotstxt-cases.json"
    if not path.is_file():
        return {"robots_google_share": None}
    cases = [case for case in json.loads(path.read_text()) if case["kind"] == "allowed"][:: 8 if smoke else 1]
    misses = []
    for case in cases:
        text = decode_document(base64.b64decode(case["robots_txt_b64"]), "text/plain").text
        if RobotsRules("http://foo.bar", text).allowed(case["url"], case["user_agent"]) != case["expected_allowed"]:
            misses.append(f"{case['test']} line {case['line']}")
    return {"robots_google_share": round(1 - len(misses) / len(cases), 4), "robots_cases": len(cases),
            "robots_misses": misses}


def block_detection_figures(smoke: bool) -> dict[str, Any]:
    """``block_detect_cpu_ms_per_page``: the built-in block markers' CPU per page on the demo's product pages,
    against ``process_page``'s CPU on the same pages (goal: at most 5 % of it, ``block_detect_share``). The
    source is the shipped ``demo_shop`` example; the pages are the demo site's own product pages."""
    from harvester.config import load_source_file
    from harvester.scraping import FetchResult, process_page
    from harvester.scraping.extraction import detection_cpu_ms
    from harvester.settings import REPOSITORY_ROOT, HarvesterSettings
    from harvester_demo.app import page, product_body

    source = load_source_file(REPOSITORY_ROOT / "include" / "sources" / "demo_shop.yaml")
    settings = HarvesterSettings()
    pages = [page(f"Product {number}", product_body(number)) for number in range(1, 21 if smoke else 201)]
    repeat = 3 if smoke else 20
    detection = sum(detection_cpu_ms(text, repeat=repeat) for text in pages) / len(pages)
    rounds = max(1, repeat // 4)
    started = time.process_time()
    for _ in range(rounds):
        for number, text in enumerate(pages, start=1):
            url = f"http://shop.example/product/{number}"
            fetch = FetchResult(url, "ok", status=200, text=text, content_type="text/html")
            process_page(source, "details", url, 0, fetch, settings=settings)
    processing = (time.process_time() - started) * 1000 / (len(pages) * rounds)
    return {"block_detect_cpu_ms_per_page": round(detection, 4), "process_page_cpu_ms_per_page": round(processing, 4),
            "block_detect_share": round(detection / processing, 4) if processing else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--smoke", action="store_true", help="a few cases of each suite (seconds, for CI)")
    arguments = parser.parse_args()
    figures: dict[str, Any] = {"bench": "realdata", "smoke": arguments.smoke}
    figures |= charset_suite_figures(arguments.smoke)
    figures |= undeclared_figures(arguments.smoke)
    figures |= robots_figures(arguments.smoke)
    figures |= block_detection_figures(arguments.smoke)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
