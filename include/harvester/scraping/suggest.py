"""`harvester suggest URL`: print (or write) a first source YAML for a page, every choice explained in a
comment. The work is :mod:`harvester.scraping.suggestion`'s, imported by the handler so that the
`harvester` command starts without parsing libraries."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "suggest", help="write a first source YAML from what a page publishes (JSON-LD, microdata, script JSON, "
                        "OpenGraph, else CSS)",
        description="Fetch URL and print a source YAML for it (or write it to FILE), each choice explained in a "
                    "comment. Check it with `harvester try FILE URL`.")
    parser.add_argument("url", help="a detail page, or a listing page with --listing, or a JSON API URL (with "
                                    "--html: the saved page's address)")
    parser.add_argument("--name", help="the source name (default: from the URL's host)")
    parser.add_argument("--listing", action="store_true",
                        help="the URL is a listing page: suggest its detail links, pagination and records")
    parser.add_argument("--render", choices=["http", "browser"],
                        help="fetch over HTTP or render in Chromium (default: HTTP, and Chromium when the HTTP body "
                             "lacks what the rendered page has)")
    parser.add_argument("--post-json", metavar="JSON",
                        help="the URL is a JSON API behind POST: send this sample body (a GraphQL query, a search) "
                             "and suggest records and the rule of the next request (cursor, page or offset)")
    parser.add_argument("--country", default="SG", help="browser sources: the page slots' country (default SG)")
    parser.add_argument("--schema", choices=["product", "job_posting", "article", "event", "auto"],
                        help="name the attributes as schema.org names this type's fields (product: name, price, sku, "
                             "availability...), each read from the most trusted place the page says it; auto: the "
                             "type the page declares or looks like (default: the page's own field names)")
    parser.add_argument("--all", dest="include_all", action="store_true",
                        help="with --schema: the page's fields outside the schema too (never site chrome)")
    parser.add_argument("--sample", action="append", default=[], metavar="URL",
                        help="another page of the site the suggestion must hold on (repeatable): a selector is kept "
                             "only when it gives its field on every page")
    parser.add_argument("--html", metavar="FILE", type=Path, help="read this saved page instead of fetching URL")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the YAML here instead of printing it")
    parser.set_defaults(handler=_suggest)


def default_name(url: str) -> str:
    host = (urlsplit(url).hostname or "site").removeprefix("www.")
    name = re.sub(r"[^a-z0-9]+", "_", host.lower()).strip("_")
    return (name if name and name[0].isalpha() else f"site_{name}")[:63]


def _suggest(args: argparse.Namespace) -> int:
    from harvester.config import parse_source
    from harvester.errors import SourceConfigError
    from harvester.scraping.suggestion import SuggestError, render_yaml, suggest

    parts = urlsplit(args.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:  # a source's seeds are web pages, nothing else
        print(f"harvester suggest: not an absolute http(s) URL: {args.url!r}", file=sys.stderr)
        return 2
    name = args.name or default_name(args.url)
    command = "harvester suggest " + " ".join(
        [args.url, *(["--listing"] if args.listing else []), *(["--render", args.render] if args.render else []),
         *(["--schema", args.schema] if args.schema else []), *(["--all"] if args.include_all else []),
         *(part for sample in args.sample for part in ("--sample", sample)),
         *(["--html", str(args.html)] if args.html else []),
         *(["--post-json", "BODY"] if args.post_json is not None else [])])
    if args.include_all and not args.schema:
        print("harvester suggest: --all widens a --schema suggestion; without --schema every field is suggested",
              file=sys.stderr)
        return 2
    try:
        body = None if args.post_json is None else json.loads(args.post_json)
    except ValueError as error:
        print(f"harvester suggest: --post-json is not JSON: {error}", file=sys.stderr)
        return 2
    try:
        suggestion = suggest(args.url, name, args.listing, args.render, args.country, schema=args.schema,
                             include_all=args.include_all, samples=args.sample, html=args.html, body=body)
    except SuggestError as error:
        print(f"harvester suggest: {error}", file=sys.stderr)
        return 1
    text = render_yaml(suggestion, command)
    try:
        parse_source(text, str(args.output or "<suggested>"))
    except SourceConfigError as error:  # a suggestion that does not validate is a bug: say so, show it
        print(text, file=sys.stderr)
        print(f"harvester suggest: the suggestion does not validate: {error}", file=sys.stderr)
        return 1
    if args.output:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}: {len(suggestion.attributes) + len(suggestion.records)} attributes; "
              f"check it with `harvester try {args.output}`", file=sys.stderr)
    else:
        print(text, end="")
    return 0
