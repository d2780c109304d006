"""`harvester export SOURCE --format jsonl|csv|parquet [--run RUN_ID] [--since T] [--changed-only] -o FILE`."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from harvester.storage.exports import FORMATS, export_query, export_records


def gone_choice(value: str | None) -> bool | None:
    """``--gone true|false`` as the filter's flag (None: every record)."""
    return None if value is None else value == "true"


def parse_since(value: str | None) -> datetime | None:
    """An ISO 8601 time (UTC when it has no offset) or a duration back from now (``7d``, ``6h``)."""
    if value is None:
        return None
    from harvester.config import parse_duration

    try:
        return datetime.now(UTC) - parse_duration(value)
    except ValueError:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def run_export(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from harvester.config import SourceConfigError, get_source
    from harvester.connections import mongo_client
    from harvester.settings import get_settings
    from harvester.storage.data_handler import DataHandler

    output = Path(args.output)
    fmt = args.format or output.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        print(f"export: say --format {'|'.join(FORMATS)} (the file's suffix {output.suffix!r} names none)",
              file=sys.stderr)
        return 2
    try:
        source = get_source(args.source)
        since = parse_since(args.since)
    except (KeyError, SourceConfigError, ValueError) as error:
        print(f"export: {error}", file=sys.stderr)
        return 1
    settings = get_settings()
    collection = DataHandler(settings).database(source)[source.output_collection]
    runs_database = mongo_client(settings=settings)[settings.mongo_database]
    query = export_query(runs_database, source, args.run_id, since, args.changed_only, gone_choice(args.gone))
    total = collection.count_documents(query.filter())
    partial = output.with_name(f".{output.name}.partial")
    with Progress(TextColumn(f"{source.name} → {output.name}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), disable=args.no_progress or not sys.stderr.isatty(),
                  console=None) as progress:
        bar = progress.add_task("export", total=total)
        with open(partial, "wb") as out:
            written = export_records(source, collection, fmt, out, query,
                                     lambda count: progress.update(bar, completed=count),
                                     escape_formulas=not args.csv_raw_formulas)
        os.replace(partial, output)
    print(f"{written} record(s) of {source.name} written to {output} ({fmt})")
    return 0
