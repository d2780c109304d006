"""The WARC archive's CPU on real pages: the 140 product pages of Zyte's benchmark, crawled with it on and off.

bench/archive.py measures the issue's goal on the demo's product pages (4.4 KB of HTML). Real pages are about a
hundred times larger (585 KB on average here), and both sides grow with them: the archive's deflate and the
payload's two SHA-1s (its digest and the record's block digest) with the page, the crawl's parse and extraction
with the page and with what the source reads. What share the archive takes of a real crawl was estimated from its
parts until 2026-12-07 (docs/production.md said "a smaller share", docs/benchmarks.md "likely above the demo's");
this measures it.

The pages (``../shared/corpora/zyte-products``) are served by ``python -m http.server`` in a process of its own
(its CPU is not the crawl's) and crawled through the worker's batch pipeline (bench/archive.py's ``crawl``:
admission, fetch, extraction, settling; records to the discard sink) in rounds alternating the archive off and on,
neither always first, the source reading what a product source reads (:data:`PRODUCT_ATTRIBUTES`; with
``--with-text`` also the page's whole text and every link, an extraction that costs about twice as much):

- ``archive_cpu_overhead``: this process's CPU over the "on" rounds over that of the "off" rounds, minus 1;
- ``archive_cpu_overhead_direct``: the archive's own code timed where it runs (``PageArchive.keep`` in the batch's
  thread, the archive's threads) over the "off" rounds' CPU;
- ``cpu_ms_per_page_off`` and ``cpu_ms_per_page_on``; ``archive_bytes_per_page`` (the WARC files) against
  ``html_bytes_per_page`` (the pages as served).

Usage: .venv/bin/python bench/archive_real.py [--rounds 8] [--with-text] [--smoke]
``--smoke``: 16 pages, one round of each side. Without the corpus it prints ``{"skipped": "why"}``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from archive import ArchiveCodeClock, alternating, crawl, crawl_environment, source_document, written_source
from rig import Processes, bench_processes, shared_corpora, start_listening, start_mongo, start_redis

# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "pages", "rounds", "attributes", "archive_cpu_overhead", "archive_cpu_overhead_direct", "cpu_ms_per_page_off",
    "cpu_ms_per_page_on", "archive_bytes_per_page", "html_bytes_per_page", "mongo",
)

CORPUS = shared_corpora() / "zyte-products" / "html"
# What a product source reads, through the selector kinds real configs use (harvester suggest writes such sets).
PRODUCT_ATTRIBUTES: dict[str, Any] = {
    "name": {"css": "h1", "strip": True},
    "title": {"css": "title", "strip": True},
    "price": {"jsonld": {"path": "offers.price || offers[0].price", "type": "Product"}, "type": "price"},
    "sku": {"jsonld": {"path": "sku", "type": "Product"}},
    "availability": {"jsonld": {"path": "offers.availability || offers[0].availability", "type": "Product"}},
    "itemprop_price": {"css": "[itemprop=price]::attr(content)", "type": "price"},
    "image": {"meta": "og:image", "type": "url"},
    "description": {"meta": "description"},
    "canonical": {"css": "link[rel=canonical]::attr(href)", "type": "url"},
}
TEXT_ATTRIBUTES: dict[str, Any] = {  # --with-text: the page's whole text and every link besides
    "words": {"css": "body ::text", "join": " ", "strip": True},
    "links": {"css": "a::attr(href)", "type": "list[url]"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds of each side (all 140 pages a round)")
    parser.add_argument("--with-text", action="store_true", help="the source also reads the page's text and links")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    pages = sorted(CORPUS.glob("*.html.gz"))
    if not pages:
        print(json.dumps({"skipped": f"{CORPUS} is absent (only the project's own machines have it)"}))
        return
    if args.smoke:
        pages, args.rounds = pages[:16], 1
    attributes = {**PRODUCT_ATTRIBUTES, **(TEXT_ATTRIBUTES if args.with_text else {})}
    with bench_processes("archive_real") as processes, tempfile.TemporaryDirectory() as site:
        html_bytes = 0
        for number, path in enumerate(pages):
            body = gzip.decompress(path.read_bytes())
            html_bytes += len(body)
            (Path(site) / f"{number}.html").write_bytes(body)
        port = serve(processes, site)
        redis_url = start_redis(processes)
        mongo, _ = start_mongo(processes)
        crawl_environment(processes, redis_url, mongo.uri, port)
        urls = [f"http://127.0.0.1:{port}/{number}.html" for number in range(len(pages))]
        figures = run_rounds(args.rounds, urls, attributes, processes.directory)
    print(json.dumps({**figures, "attributes": len(attributes), "pages": len(pages), "rounds": args.rounds,
                      "html_bytes_per_page": round(html_bytes / len(pages)), "mongo": mongo.kind}))


def serve(processes: Processes, folder: str) -> int:
    """The pages of ``folder`` on a loopback port, by a process of their own (stopped with the bench's others)."""
    _, port = start_listening(processes, "pages", lambda port: [
        sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory", folder])
    return port


def run_rounds(rounds: int, urls: list[str], attributes: dict[str, Any], directory: Path) -> dict[str, Any]:
    from harvester.config import SourceConfig
    from harvester.connections import REDIS_DEFAULT, redis_client
    from harvester.settings import get_settings
    from harvester.workers.batch import BatchRunner, freeze_startup_objects

    settings = get_settings()
    client = redis_client(REDIS_DEFAULT, settings=settings)
    site_url = urls[0].rsplit("/", 1)[0]
    warc = directory / "warc"

    def source(name: str, archived: bool) -> SourceConfig:
        return written_source(directory, {**source_document(name, site_url, warc if archived else None),
                                          "attributes": attributes, "timeout": 60,
                                          "input": {"seeds": urls[:1], "kind": "details"}})

    runner = BatchRunner(settings)
    cpu = {"off": 0.0, "on": 0.0}
    try:
        crawl(runner, client, source("real_warm", False), urls[:16], "warm")  # imports, connections: first
        freeze_startup_objects()  # as a Celery worker process does once it is ready
        clock = ArchiveCodeClock(runner)
        for round_number, mode in alternating(rounds):
            _, seconds = crawl(runner, client, source(f"real_{mode}_{round_number}", mode == "on"), urls,
                               f"run-{round_number}")
            cpu[mode] += seconds
        runner.archive.flush()
        archive_code = clock.seconds()
    finally:
        runner.close()
    crawled = len(urls) * rounds
    warc_bytes = sum(path.stat().st_size for path in warc.rglob("*.warc.gz"))
    return {"archive_cpu_overhead": round(cpu["on"] / cpu["off"] - 1, 4),
            "archive_cpu_overhead_direct": round(archive_code / cpu["off"], 4),
            "cpu_ms_per_page_off": round(1000 * cpu["off"] / crawled, 3),
            "cpu_ms_per_page_on": round(1000 * cpu["on"] / crawled, 3),
            "archive_bytes_per_page": round(warc_bytes / crawled)}


if __name__ == "__main__":
    main()
