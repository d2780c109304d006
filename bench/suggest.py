"""`harvester suggest --schema product` on real shops, scored as Zyte's product extraction benchmark scores.

The benchmark's 140 product pages (``../shared/corpora/zyte-products``: real pages from 62 hosts, with ground
truth) are served on a loopback port. For each page the bench asks for a suggestion as the command does
(``suggest(URL, schema="product")``, over HTTP), validates the YAML it would print, then extracts one record
from the page with that source, as ``harvester try`` does. One value per field, compared as the benchmark
compares: price as a Decimal, sku and availability exactly (availability: ``InStock`` for a true ``availability``,
``OutOfStock`` for a false one, and, as the benchmark's evaluation fills an empty availability of the systems that
may leave it empty, ``InStock`` when none was extracted: it is a required attribute there). A right value is a
true positive, a wrong one a false positive (and a false negative when the page has a value), a missing one a
false negative where the page has a value.

The pages are split once, by their id, into the part rules were developed on and a held-out part nobody
looked at while writing them (ids from ``c`` on): both figures are printed, beside the whole corpus's.

Keys of the JSON object on the last line: ``price_f1``, ``sku_f1``, ``availability_f1``, ``name_share``
(pages whose record has a name), ``chrome_attributes`` (suggested attributes named like site chrome:
navigation, cart, wish list, search, share, cookie, toast), ``suggest_seconds_per_page``, ``held_out`` and
``developed`` (the same figures per part), ``failures`` (pages the suggestion refused, with the reason) and
``published`` (the benchmark's table for the other three systems).

Usage: .venv/bin/python bench/suggest.py [--smoke] [--pages N] [--show]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import threading
import time
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rig import shared_corpora

ROOT = Path(__file__).resolve().parents[1]
CORPUS = shared_corpora() / "zyte-products"
FIELDS = ("price", "sku", "availability")
PUBLISHED = {
    "zyte_automatic_extraction": {"price_f1": 0.918, "sku_f1": 0.841, "availability_f1": 0.957},
    "diffbot": {"price_f1": 0.824, "sku_f1": 0.765, "availability_f1": 0.943},
    "extruct": {"price_f1": 0.685, "sku_f1": 0.537, "availability_f1": 0.626},
}
# --smoke (CI): every other page of 12 spread over the corpus by id (the pages the smoke ran before it was halved,
# both parts, developed and held out, among them; page costs vary 10-fold, 0.3-3.7 s CPU, so the sample is fixed).
SMOKE_SPREAD = 12
SMOKE_PAGES = 6
HELD_OUT_FROM = "c"  # ids starting with c, d, e or f: about a quarter of the pages, kept out of rule writing
# Words of site chrome in an attribute name: a suggested field named so is navigation, not the product.
CHROME = re.compile(r"(?:^|_)(?:nav|navigation|menu|cart|basket|bag|wish|wishlist|search|share|social|cookie|"
                    r"consent|toast|toaster|login|signin|account|footer|header|breadcrumb|newsletter|"
                    r"banner|modal|popup|hamburger|locale|logo)(?:_|$)")


# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "pages", "price_f1", "sku_f1", "availability_f1", "name_share", "chrome_attributes",
    "suggest_seconds_per_page", "developed", "held_out", "published", "smoke",
)


def serve(pages: dict[str, bytes]) -> tuple[ThreadingHTTPServer, str]:
    """The captured pages on a loopback port, one path each, as bytes (the fetcher sniffs their charset)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path.strip("/").removeprefix("p/"))
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def predicted(record: dict[str, Any]) -> dict[str, str | None]:
    """The record's one value per benchmark field, in the benchmark's terms."""
    price = record.get("price")
    amount = price.get("amount") if isinstance(price, dict) else price
    sku = record.get("sku")
    availability = record.get("availability")
    return {
        "price": None if amount is None else str(amount),
        "sku": None if sku in (None, "") else str(sku).strip(),
        "availability": "OutOfStock" if availability is False else "InStock",  # empty: InStock, as the benchmark fills
    }


def matches(field: str, value: str, truth: list[str]) -> bool:
    if field != "price":
        return value in truth
    try:
        return any(Decimal(value) == Decimal(expected) for expected in truth)
    except InvalidOperation:
        return False


def f1(counts: dict[str, int]) -> float:
    precision = counts["tp"] / (counts["tp"] + counts["fp"]) if counts["tp"] + counts["fp"] else 0.0
    recall = counts["tp"] / (counts["tp"] + counts["fn"]) if counts["tp"] + counts["fn"] else 0.0
    return round(2 * precision * recall / (precision + recall), 3) if precision + recall else 0.0


def figures(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The benchmark's F1 per field over these pages, and the share of pages with a name."""
    out: dict[str, Any] = {"pages": len(results)}
    for field in FIELDS:
        counts = {"tp": 0, "fp": 0, "fn": 0}
        for result in results:
            truth, value = result["truth"].get(field) or [], result["predicted"].get(field)
            if value is not None and truth and matches(field, value, truth):
                counts["tp"] += 1
            elif value is not None:
                counts["fp"] += 1
                counts["fn"] += bool(truth)
            elif truth:
                counts["fn"] += 1
        out[f"{field}_f1"] = f1(counts)
    out["name_share"] = round(sum(bool(result["name"]) for result in results) / len(results), 3) if results else 0.0
    return out


def one_page(page_id: str, base: str) -> dict[str, Any]:
    from harvester.config import parse_source
    from harvester.scraping.extraction import DataBounds, PageData, extract_record
    from harvester.scraping.suggestion import SuggestError, render_yaml, suggest
    from harvester.settings import get_settings

    url = f"{base}/p/{page_id}"
    started = time.perf_counter()
    try:
        suggestion = suggest(url, "product_page", render="http", schema="product")
    except SuggestError as error:
        return {"id": page_id, "seconds": time.perf_counter() - started, "failure": str(error), "predicted": {},
                "name": None, "attributes": []}
    seconds = time.perf_counter() - started
    source = parse_source(render_yaml(suggestion, "bench"), "<suggested>")
    text = fetch_text(url)
    page = PageData(text, url, "html", DataBounds.from_settings(get_settings()))
    record = extract_record(source, page, url).record
    return {"id": page_id, "seconds": seconds, "predicted": predicted(record), "name": record.get("name"),
            "attributes": [choice.name for choice in suggestion.attributes],
            "specs": {choice.name: choice.spec for choice in suggestion.attributes}}


def fetch_text(url: str) -> str:
    """The page's text as `harvester try` decodes it (the same fetcher)."""
    import asyncio

    from harvester.scraping.suggestion.analysis import fetch_page

    return asyncio.run(fetch_page(url, "product_page", "http", None)).text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="6 pages, for CI (seconds)")
    parser.add_argument("--pages", type=int, default=0, help="only the first N pages (0: all)")
    parser.add_argument("--show", action="store_true", help="print each wrong field to stderr")
    parser.add_argument("--only", default="", help="only the pages whose id starts with one of these (comma-separated)")
    args = parser.parse_args()
    if not CORPUS.is_dir():
        print(json.dumps({"skipped": f"{CORPUS} is absent"}))
        return 0
    os.environ.setdefault("HARVESTER_ALLOWED_PRIVATE_NETWORKS", "127.0.0.1/32")
    truth = json.loads((CORPUS / "ground-truth.json").read_text())
    ids = sorted(truth)
    if args.smoke:
        ids = ids[::max(1, len(ids) // SMOKE_SPREAD)][:SMOKE_SPREAD:SMOKE_SPREAD // SMOKE_PAGES]
    elif args.pages:
        ids = ids[::max(1, len(ids) // args.pages)][:args.pages]
    if args.only:
        ids = [page_id for page_id in ids if page_id.startswith(tuple(args.only.split(",")))]
    pages = {page_id: gzip.decompress((CORPUS / "html" / f"{page_id}.html.gz").read_bytes()) for page_id in ids}
    server, base = serve(pages)
    results = []
    try:
        for page_id in ids:
            result = one_page(page_id, base)
            result["truth"] = truth[page_id]
            results.append(result)
            if args.show and page_id < HELD_OUT_FROM:  # the held-out pages are not looked at
                show(result)
    finally:
        server.shutdown()
    chrome = sorted({name for result in results for name in result["attributes"] if CHROME.search(name)})
    held = [result for result in results if result["id"] >= HELD_OUT_FROM]
    developed = [result for result in results if result["id"] < HELD_OUT_FROM]
    summary = {**figures(results), "chrome_attributes": len(chrome), "chrome_names": chrome,
               "suggest_seconds_per_page": round(sum(result["seconds"] for result in results) / len(results), 3),
               "developed": figures(developed), "held_out": figures(held),
               "failures": {result["id"][:12]: result["failure"][:160] for result in results if "failure" in result},
               "published": PUBLISHED, "smoke": args.smoke}
    print(json.dumps(summary))
    return 0


def show(result: dict[str, Any]) -> None:
    for field in FIELDS:
        truth, value = result["truth"].get(field) or [], result["predicted"].get(field)
        if not (value is None and not truth) and not (value is not None and matches(field, value, truth)):
            print(f"{result['id'][:10]} {field}: got {value!r}, want {truth[:2]!r} from "
                  f"{json.dumps(result.get('specs', {}).get(field), ensure_ascii=False)[:300]}", file=sys.stderr)
    if not result["name"]:
        print(f"{result['id'][:10]} name: none ({result.get('failure', '')[:100]})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
