"""`harvester rekey --source X`: the storage component's command (records and seen-URL keys)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    rekey = subparsers.add_parser(
        "rekey", help="move a source's stored URLs and seen-URL keys to the canonical URL form",
        description="Rewrite the url of every output record of a source to its canonical form "
                    "(docs/sources.md, URL rules), keep the newest record when two spellings meet, and "
                    "move the seen-URL keys of those URLs in Redis. Safe to run twice.",
    )
    rekey.add_argument("--source", required=True, help="the source name")
    rekey.add_argument("--dry-run", action="store_true", help="count what would move; change nothing")
    rekey.set_defaults(handler=_rekey)


def _rekey(args: argparse.Namespace) -> int:
    from harvester.config.loader import SourceConfigError, get_source
    from harvester.connections import mongo_client, redis_client
    from harvester.settings import get_settings
    from harvester.storage.rekey import rekey_source

    settings = get_settings()
    try:
        source = get_source(args.source)
    except (KeyError, SourceConfigError) as error:
        print(f"rekey: {error}", file=sys.stderr)
        return 1
    client = mongo_client(source.output.connection_id, settings=settings)
    database = client[source.output.database or settings.mongo_database]
    seen_urls = None if args.dry_run else redis_client(settings=settings)
    result = rekey_source(source, database[source.output_collection], seen_urls, dry_run=args.dry_run)
    if args.dry_run:
        print(f"{source.name}: {result.to_move} record(s) to move (dry run: nothing changed)")
    else:
        print(f"{source.name}: {result.moved} record(s) moved, {result.duplicates_removed} duplicate(s) removed, "
              f"{result.seen_keys_moved} seen-URL key(s) moved")
    if result.not_http:
        print(f"{source.name}: {result.not_http} record(s) whose url is not an http(s) URL were left as they are")
    return 0
