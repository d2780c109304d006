"""`harvester try SOURCE [URL]`: fetch one page with the source's settings (or read a saved one with
``--html``) and show what a harvest would take from it (record, what each selector matched, problems,
links to follow) while writing nothing, like `scrapy parse`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "try", help="fetch one page of a source and print the record, its problems and its links (writes nothing)")
    parser.add_argument("source", help="a source name (from the sources directory) or a path to a YAML file")
    parser.add_argument("url", nargs="?", help="the page to try (default: the source's first seed, or its first "
                                               "request of input.requests)")
    parser.add_argument("--kind", choices=["listing", "details"],
                        help="treat the page as a listing or a detail page (default: seeds are the input kind, "
                             "other URLs are detail pages)")
    parser.add_argument("--depth", type=int, default=0, help="BFS depth of a listing page (for max_depth)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--html", metavar="FILE", type=Path,
                        help="read this saved page instead of fetching (an HTML file, or JSON for content: json)")
    parser.add_argument("--url", dest="base_url", metavar="URL",
                        help="with --html: the page's address (relative links resolve against it; default: the "
                             "URL argument or the first seed)")
    parser.add_argument("--warc", metavar="FILE", type=Path,
                        help="read the URL's archived response from this WARC file instead of fetching (a file of "
                             "the source's output.archive; default URL: the file's first response)")
    parser.add_argument("--post-json", metavar="JSON",
                        help="send this JSON body with a POST to the URL (an API's query; default: the source's "
                             "first request, when the URL is its URL)")
    parser.set_defaults(handler=_try)


def _load(reference: str) -> Any:
    from harvester.config import get_source, load_source_file

    path = Path(reference)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return load_source_file(path)
    return get_source(reference)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


async def fetch_for_try(source: Any, url: str, settings: Any, kind: str = "details", request: Any = None) -> Any:
    """One page as `harvester try` (and `harvester suggest`) fetches it: HTTP (with ``request``'s method and
    body, when given), or the one-shot browser render for browser sources. The one place these tools call the
    browser."""
    if source.render == "browser":
        from harvester.scraping.browser import render_page

        return await render_page(url, source, settings, kind)
    from harvester.scraping.fetching import Fetcher

    async with Fetcher(settings, max_connections=2) as fetcher:
        return await fetcher.fetch(url, source, request=request)


def saved_page(path: Path, url: str, cap: int) -> Any:
    """A page saved to a file, as if it had been fetched from ``url``: at most ``cap`` bytes of it are read (the
    fetched pages' ``body_size_cap_bytes``), so a file of any size costs what a page may cost."""
    from harvester.scraping.fetching import FetchResult, decode_text

    with path.open("rb") as handle:
        body = handle.read(cap + 1)
    truncated = len(body) > cap
    body = body[:cap]
    return FetchResult(url, "ok", final_url=url, status=200, text=decode_text(body, None), size=len(body),
                       truncated=truncated, reason=f"body cut at {cap} decoded bytes" if truncated else "")


def warc_page(path: Path, url: str | None) -> Any:
    """The latest response record of ``url`` in a WARC file (its first response when ``url`` is None), as if
    fetched. The URL is looked up as web archives do, by its SURT key (:func:`harvester.urls.surt_key`: query
    parameters in any order, ``www.``, the host's case), a record of exactly that URL preferred. Raises
    :class:`LookupError` saying why when the file holds none: no record of the URL, or only a revisit (its payload
    is in an earlier file: a later run of an unchanged page). Read with warcio, the archive's own library."""
    from warcio.archiveiterator import ArchiveIterator

    from harvester.scraping.fetching import FetchResult, decode_text
    from harvester.urls import surt_key

    key = None if url is None else surt_key(url)
    found: tuple[bool, str, int, str, bytes] | None = None  # (exact, target, status, content type, body)
    revisit: tuple[str, str] | None = None  # (the revisited URL, the date of the copy it names)
    with path.open("rb") as handle:
        for record in ArchiveIterator(handle):
            target = record.rec_headers.get_header("WARC-Target-URI") or ""
            if record.rec_type not in ("response", "revisit") or record.http_headers is None:
                continue
            exact = target == url
            if url is not None and not exact and surt_key(target) != key:
                continue
            if record.rec_type == "revisit":
                revisit = (target, record.rec_headers.get_header("WARC-Refers-To-Date") or "an earlier time")
                continue
            if found is None or exact or not found[0]:  # the latest of the best match
                found = (exact, target, int(record.http_headers.get_statuscode()),
                         record.http_headers.get_header("Content-Type") or "", record.content_stream().read())
            if url is None:
                break
    if found is None:
        if revisit is not None:
            raise LookupError(f"{path} holds only a revisit of {revisit[0]}: the same page as archived at "
                              f"{revisit[1]}, whose payload is in an earlier file (harvester replay serves it)")
        raise LookupError(f"no response of {url or 'any URL'} in {path}")
    _, target, status, content_type, body = found
    return FetchResult(target, "ok", final_url=target, status=status, text=decode_text(body, content_type),
                       content_type=content_type, size=len(body))


def _traces(extraction: Any) -> dict[str, Any]:
    return {name: {"selector": trace.selector, "matched": trace.matched, "samples": trace.samples,
                   "value": _plain(trace.value), "problem": trace.problem}
            for name, trace in (extraction.traces or {}).items()}


async def try_page(source: Any, url: str, kind: str, depth: int, html: Path | None = None,
                   fetched: Any = None, request: Any = None) -> dict[str, Any]:
    """Fetch (HTTP or Chromium) and process one page, or read it from ``html`` (or take it ``fetched`` from an
    archive); the report `harvester try` prints. ``request``: the method and body to send (an API's POST), shown
    as written (secrets stay placeholders), and the next requests ``listing.next`` builds are shown the same way."""
    from harvester.scraping.page import process_page
    from harvester.settings import get_settings

    settings = get_settings()
    fetch = fetched or (saved_page(html, url, settings.body_size_cap_bytes) if html is not None
                        else await fetch_for_try(source, url, settings, kind, request))
    page = process_page(source, kind, url, depth, fetch, trace=True, request=request)
    render = "warc" if fetched is not None else "file" if html else source.render
    report: dict[str, Any] = {
        "source": source.name, "url": page.url, "kind": kind, "render": render,
        "outcome": fetch.counter, "status": fetch.status, "http_version": fetch.http_version or None,
        "final_url": fetch.final_url,
        "elapsed_s": round(fetch.elapsed, 3), "bytes": fetch.size, "truncated": fetch.truncated,
        "blocked_requests": fetch.blocked_requests if source.render == "browser" else None,
        "reason": fetch.reason or None, "retryable": fetch.retryable if not fetch.ok else None,
        "gone": page.gone, "requested_url": page.requested_url,
    }
    if page.extraction is not None:
        report["record"] = _plain(page.extraction.record)
        report["problems"] = [str(problem) for problem in page.extraction.problems]
        report["rejected"] = page.extraction.rejected_reason
        report["selectors"] = _traces(page.extraction)
    if page.listing_records is not None:
        listing = page.listing_records
        report["records"] = [_plain(record) for record in listing.records]
        report["records_items"] = listing.items
        report["records_problem"] = str(listing.problem) if listing.problem else None
        report["records_rejected"] = [extraction.rejected_reason for extraction in listing.rejected]
        report["selectors"] = _traces(listing.extractions[0]) if listing.extractions else {}
        problems = [str(problem) for extraction in listing.extractions for problem in extraction.problems]
        report["problems"] = problems[:50]
    if request is not None:
        report["request"] = request_summary(request)
    if page.discovery is not None:
        report["follow_details"] = page.discovery.details
        report["follow_listings"] = [_listing_line(page.discovery, key) for key in page.discovery.listings]
        report["ignored_links"] = page.discovery.ignored
    return report


def request_summary(request: Any) -> str:
    """A request as a line: its method and its body as written (connection placeholders unfilled)."""
    body = request.body_bytes()
    return f"{request.method} {body.decode() if body is not None else '(no body)'}"


def _listing_line(discovery: Any, key: str) -> str:
    url, request = discovery.listing_request(key)
    return url if request is None else f"{url}  {request_summary(request)}"


def _print_selectors(selectors: dict[str, Any], heading: str) -> None:
    print(f"  {heading}:")
    for name, trace in selectors.items():
        samples = ", ".join(json.dumps(sample, ensure_ascii=False) for sample in trace["samples"])
        print(f"    {name:<16} {trace['selector']}")
        print(f"    {'':<16} matched {trace['matched']}" + (f": {samples}" if samples else ""))
        if trace["problem"]:
            print(f"    {'':<16} problem: {trace['problem']}")


def _print_text(report: dict[str, Any]) -> None:
    print(f"{report['source']}  {report['kind']}  {report['url']}")
    if report.get("request"):
        print(f"  request: {report['request']}")
    line = (f"  fetch: {report['outcome']} (status {report['status']}, {report['http_version']}) "
            f"in {report['elapsed_s']}s, {report['bytes']} bytes")
    print(line + (" [cut at the size cap]" if report["truncated"] else ""))
    if report.get("gone"):  # what a harvest does with it: the stored record gets gone_at, nothing is extracted
        print(f"  GONE: {report['gone']} (a stored record would get gone_at and keep its values)")
    elif report["reason"]:
        print(f"  reason: {report['reason']}" + ("  (would be retried)" if report["retryable"] else ""))
    if report.get("selectors"):
        _print_selectors(report["selectors"], "selectors (what each matched" +
                         (", on the first item)" if "records" in report else ")"))
    if "records" in report:
        print(f"  records ({len(report['records'])} of {report['records_items']} items):")
        for record in report["records"][:5]:
            print("    " + json.dumps(record, ensure_ascii=False))
        if len(report["records"]) > 5:
            print(f"    ... {len(report['records']) - 5} more")
        if report["records_problem"]:
            print(f"  items: {report['records_problem']}")
        for reason in report["records_rejected"][:3]:
            print(f"  item REJECTED: {reason}")
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


def _what_to_try(source: Any, args: argparse.Namespace) -> tuple[str | None, Any]:
    """The URL and request to try: the arguments', else the first seed, else the first of ``input.requests``.
    A URL that is a request's URL is sent with that request unless ``--post-json`` gives another body."""
    from harvester.config import HttpRequest

    url = args.url or args.base_url or (source.input.seeds[0] if source.input.seeds else None)
    if url is None and source.input.requests:
        url = source.input.requests[0].url
    request = next((seed.request for seed in source.input.requests if seed.url == url), None)
    if args.post_json is not None:
        request = HttpRequest.model_validate({"method": "POST", "json": json.loads(args.post_json)})
    return url, request


def _try(args: argparse.Namespace) -> int:
    try:
        source = _load(args.source)
    except Exception as error:  # a config error is the answer the user needs, not a traceback
        print(f"harvester try: {error}", file=sys.stderr)
        return 2
    try:
        url, request = _what_to_try(source, args)
    except ValueError as error:  # not JSON, or not a body a request may carry (pydantic's errors are ValueErrors)
        print(f"harvester try: --post-json: {error}", file=sys.stderr)
        return 2
    if args.base_url and not args.html:
        print("harvester try: --url names the address of a page read with --html", file=sys.stderr)
        return 2
    if args.html is not None:
        url = args.base_url or args.url or url or "http://saved.invalid/"
        if not args.html.is_file():
            print(f"harvester try: no such file: {args.html}", file=sys.stderr)
            return 2
    fetched = None
    if args.warc is not None:
        if not args.warc.is_file():
            print(f"harvester try: no such file: {args.warc}", file=sys.stderr)
            return 2
        try:
            fetched = warc_page(args.warc, args.url)
        except LookupError as error:
            print(f"harvester try: {error}", file=sys.stderr)
            return 2
        url = fetched.url
    if url is None:
        print("harvester try: give a URL (the source has no seed URLs)", file=sys.stderr)
        return 2
    first_requests = {seed.url for seed in source.input.requests}
    kind = args.kind or (source.input.kind if args.url is None or url in (*source.input.seeds, *first_requests)
                         else "details")
    report = asyncio.run(try_page(source, url, kind, args.depth, args.html, fetched, request))
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        _print_text(report)
    return 0 if report["outcome"] in ("ok", "not_modified") and not report.get("rejected") else 1
