"""The storage component's commands: `harvester records SOURCE` (the latest records of a source),
`harvester export SOURCE` (a file of its records), `harvester rekey --source X` (records and seen-URL keys) and
`harvester archive cdxj|expire SOURCE` (the WARC archive's index as CDXJ, its clean-up) and `harvester replay
SOURCE` (its archived pages served on loopback)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    archive = subparsers.add_parser(
        "archive", help="a source's WARC archive: its index as CDXJ, or the clean-up of what is past keep",
        description="cdxj: print the archive index of a source (or one run) as CDXJ lines, sorted, for pywb and "
                    "other replay tools, each file named by its path under the source's archive location (set "
                    "pywb's archive_paths to that location); expire: delete the source's archived files and index "
                    "rows past output.archive.keep now (the clean-up after each run's report does it too).")
    archive.add_argument("action", choices=["cdxj", "expire"])
    archive.add_argument("source", help="the source name")
    archive.add_argument("--run", dest="run_id", help="cdxj: only the pages of this run")
    archive.add_argument("--file-urls", action="store_true",
                         help="cdxj: name each file by its URL, not by its path under the archive location")
    archive.set_defaults(handler=_archive)
    replay = subparsers.add_parser(
        "replay", help="serve a source's archived pages on loopback (a recorded site for try and tests)",
        description="Answer each request with the archived status, headers and body of the latest page of its "
                    "path and query (of --run, else of the whole archive); unknown paths answer 404.")
    replay.add_argument("source", help="the source name")
    replay.add_argument("--run", dest="run_id", help="only the pages of this run")
    replay.add_argument("--port", type=int, default=0, help="the loopback port (default: a free one)")
    replay.set_defaults(handler=_replay)
    rekey = subparsers.add_parser(
        "rekey", help="move a source's stored URLs and seen-URL keys to the canonical URL form",
        description="Rewrite the url of every output record of a source to its canonical form "
                    "(docs/sources.md, URL rules), keep the newest record when two spellings meet, and "
                    "move the seen-URL keys of those URLs in Redis. Safe to run twice.",
    )
    rekey.add_argument("--source", required=True, help="the source name")
    rekey.add_argument("--dry-run", action="store_true", help="count what would move; change nothing")
    rekey.set_defaults(handler=_rekey)
    records = subparsers.add_parser(
        "records", help="show a source's latest records (newest harvested first)",
        description="Read the source's output collection (output.connection_id, else HARVESTER_MONGO_URI) and "
                    "print its most recently harvested records.")
    records.add_argument("source", help="the source name")
    records.add_argument("--limit", type=int, default=10, help="how many records (default 10)")
    records.add_argument("--run", dest="run_id", help="only the records of this run id")
    records.add_argument("--gone", choices=["true", "false"],
                         help="true: only records of gone items (gone_at set); false: only items still there")
    records.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    records.set_defaults(handler=_records)
    export = subparsers.add_parser(
        "export", help="write a source's records to a JSON Lines, CSV or Parquet file",
        description="Stream the source's records (all, a run's, those harvested since a time, or only those "
                    "whose values changed) into a file, with a progress bar. Types are kept: docs/sources.md.")
    export.add_argument("source", help="the source name")
    export.add_argument("--format", choices=["jsonl", "csv", "parquet"], help="default: from the file's suffix")
    export.add_argument("--run", dest="run_id", help="only the records of this run id")
    export.add_argument("--since", help="only records harvested since: an ISO 8601 time or a duration (7d, 6h)")
    export.add_argument("--changed-only", action="store_true",
                        help="only records that are new or changed (in --run, since --since, else in the latest run)")
    export.add_argument("--gone", choices=["true", "false"],
                        help="true: only records of gone items (gone_at set); false: only items still there")
    export.add_argument("-o", "--output", required=True, help="the file to write (replaced when complete)")
    export.add_argument("--no-progress", action="store_true", help="no progress bar")
    export.add_argument("--csv-raw-formulas", action="store_true",
                        help="CSV: write text cells that begin with = + - @ TAB or CR as harvested (by default a ' "
                             "goes first, so a spreadsheet does not run a site's text as a formula)")
    export.set_defaults(handler=_export)


def _rekey(args: argparse.Namespace) -> int:
    from harvester.config import SourceConfigError, get_source
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


def _records(args: argparse.Namespace) -> int:
    import json

    from harvester.config import SourceConfigError, get_source
    from harvester.settings import get_settings
    from harvester.storage.data_handler import DataHandler
    from harvester.storage.records import latest_records, plain

    try:
        source = get_source(args.source)
    except (KeyError, SourceConfigError) as error:
        print(f"records: {error}", file=sys.stderr)
        return 1
    data = DataHandler(get_settings())
    collection = data.database(source)[source.output_collection]
    from harvester.storage.export_command import gone_choice

    found = latest_records(collection, max(1, args.limit), args.run_id, gone_choice(args.gone))
    for record in found:
        if args.json:
            print(json.dumps(plain(record), ensure_ascii=False))
        else:
            when = record.get("harvested_at")
            print(f"{when:%Y-%m-%d %H:%M:%S}  {record.get('url')}" if when else str(record.get("url")))
            fields = {key: value for key, value in plain(record).items()
                      if key not in ("_id", "url", "harvested_at", "first_seen_at", "run_id")}
            print("    " + json.dumps(fields, ensure_ascii=False))
    if not args.json:
        print(f"{len(found)} record(s) of {source.name} in {collection.database.name}.{collection.name}"
              + (f", run {args.run_id}" if args.run_id else ""))
    return 0


def _export(args: argparse.Namespace) -> int:
    from harvester.storage.export_command import run_export

    return run_export(args)


def _archive(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from harvester.config import get_source
    from harvester.errors import HarvesterError
    from harvester.settings import get_settings
    from harvester.storage import ArchivedDigests, ArchiveIndex, archive_location, cdxj_line, expire_archive

    settings = get_settings()
    try:
        source = get_source(args.source)
        index = ArchiveIndex.from_settings(settings)
        if args.action == "cdxj":
            location = None if args.file_urls else archive_location(source, settings.archive_location)
            for line in sorted(cdxj_line(row, location) for row in index.rows(source.name, args.run_id)):
                print(line)
            return 0
        expired = expire_archive(source, index, settings.archive_location, datetime.now(UTC),
                                 ArchivedDigests.from_settings(settings, index))
    except (HarvesterError, LookupError) as error:  # no such source, the index or the files unreachable
        print(f"archive {args.action} {args.source}: {error}", file=sys.stderr)
        return 2
    print(f"{source.name}: {expired.files} files and {expired.rows} index rows past keep={source.output.archive.keep} "
          "deleted" + (f" ({expired.missing} rows of files gone from storage)" if expired.missing else ""))
    return 0


def _replay(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib

    from aiohttp import web

    from harvester.errors import HarvesterError
    from harvester.settings import get_settings
    from harvester.storage import ArchiveIndex, ArchiveReplay

    try:
        replay = ArchiveReplay(ArchiveIndex.from_settings(get_settings()), args.source, args.run_id)
    except HarvesterError as error:  # the index unreachable
        print(f"replay {args.source}: {error}", file=sys.stderr)
        return 2
    if not replay.rows:
        print(f"replay {args.source}: nothing archived{f' by run {args.run_id}' if args.run_id else ''}",
              file=sys.stderr)
        return 2

    async def serve() -> None:
        runner = web.AppRunner(replay.application())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)  # loopback only: a replay is for tools and tests
        await site.start()
        port = runner.addresses[0][1]
        print(f"replaying {len(replay.rows)} paths of {args.source} at http://127.0.0.1:{port}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a replay ends
        asyncio.run(serve())
    return 0
