"""`harvester try SOURCE [URL]`: fetch one page with the source's settings and show what a harvest
would take from it (record, problems, links to follow) while writing nothing, like `scrapy parse`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import date, datetime
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "try", help="fetch one page of a source and print the record, its problems and its links (writes nothing)")
    parser.add_argument("source", help="a source name (from the sources directory) or a path to a YAML file")
    parser.add_argument("url", nargs="?", help="the page to try (default: the source's first seed)")
    parser.add_argument("--kind", choices=["listing", "details"],
                        help="treat the page as a listing or a detail page (default: seeds are the input kind, "
                             "other URLs are detail pages)")
    parser.add_argument("--depth", type=int, default=0, help="BFS depth of a listing page (for max_depth)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(handler=_try)


def _load(reference: str) -> Any:
    from harvester.config.loader import get_source, load_source_file

    path = Path(reference)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return load_source_file(path)
    return get_source(reference)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


async def try_page(source: Any, url: str, kind: str, depth: int) -> dict[str, Any]:
    """Fetch (HTTP or Chromium) and process one page; the report `harvester try` prints."""
    from harvester.scraping.fetcher import Fetcher
    from harvester.scraping.page import process_page
    from harvester.settings import get_settings

    settings = get_settings()
    if source.render == "browser":
        from harvester.scraping.slot_browser import render_page

        fetch = await render_page(url, source, settings, kind)
    else:
        async with Fetcher(settings, max_connections=2) as fetcher:
            fetch = await fetcher.fetch(url, source)
    page = process_page(source, kind, url, depth, fetch)
    report: dict[str, Any] = {
        "source": source.name, "url": page.url, "kind": kind, "render": source.render,
        "outcome": fetch.counter, "status": fetch.status, "http_version": fetch.http_version or None,
        "final_url": fetch.final_url,
        "elapsed_s": round(fetch.elapsed, 3), "bytes": fetch.size, "truncated": fetch.truncated,
        "blocked_requests": fetch.blocked_requests if source.render == "browser" else None,
        "reason": fetch.reason or None, "retryable": fetch.retryable if not fetch.ok else None,
    }
    if page.extraction is not None:
        report["record"] = _plain(page.extraction.record)
        report["problems"] = [str(problem) for problem in page.extraction.problems]
        report["rejected"] = page.extraction.rejected_reason
    if page.discovery is not None:
        report["follow_details"] = page.discovery.details
        report["follow_listings"] = page.discovery.listings
        report["ignored_links"] = page.discovery.ignored
    return report


def _print_text(report: dict[str, Any]) -> None:
    print(f"{report['source']}  {report['kind']}  {report['url']}")
    line = (f"  fetch: {report['outcome']} (status {report['status']}, {report['http_version']}) "
            f"in {report['elapsed_s']}s, {report['bytes']} bytes")
    print(line + (" [cut at the size cap]" if report["truncated"] else ""))
    if report["reason"]:
        print(f"  reason: {report['reason']}" + ("  (would be retried)" if report["retryable"] else ""))
    if "record" in report:
        if report["rejected"]:
            print(f"  REJECTED: {report['rejected']}")
        else:
            print("  record:")
            print("    " + json.dumps(report["record"], indent=2, ensure_ascii=False).replace("\n", "\n    "))
        print(f"  problems ({len(report['problems'])}):")
        for problem in report["problems"]:
            print(f"    - {problem}")
    if "follow_details" in report:
        print(f"  detail links it would follow ({len(report['follow_details'])}):")
        for url in report["follow_details"]:
            print(f"    {url}")
        print(f"  listing pages it would queue ({len(report['follow_listings'])}):")
        for url in report["follow_listings"]:
            print(f"    {url}")
        if report["ignored_links"]:
            print(f"  ignored links: {report['ignored_links']}")


def _try(args: argparse.Namespace) -> int:
    try:
        source = _load(args.source)
    except Exception as error:  # a config error is the answer the user needs, not a traceback
        print(f"harvester try: {error}", file=sys.stderr)
        return 2
    url = args.url or (source.input.seeds[0] if source.input.seeds else None)
    if url is None:
        print("harvester try: give a URL (the source has no seed URLs)", file=sys.stderr)
        return 2
    kind = args.kind or (source.input.kind if args.url is None or url in source.input.seeds else "details")
    report = asyncio.run(try_page(source, url, kind, args.depth))
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        _print_text(report)
    return 0 if report["outcome"] in ("ok", "not_modified") and not report.get("rejected") else 1
