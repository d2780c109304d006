"""`harvester validate [PATH...]`, `harvester sources` and `harvester schema`: the config layer's commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harvester.config.loader import SourceSet, default_directory, iter_problems, load_source_paths
from harvester.config.model import format_duration


def register(subparsers: argparse._SubParsersAction) -> None:
    validate = subparsers.add_parser(
        "validate", help="check source files; print each problem as file:line: field: reason",
        description="Check source YAML files (default: every file of the sources directory). "
                    "Exits 1 when any file has a problem.",
    )
    validate.add_argument("paths", nargs="*", metavar="PATH", help="source files or directories")
    validate.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    validate.set_defaults(handler=_validate)

    sources = subparsers.add_parser("sources", help="list the sources with their schedule, queue and limits")
    sources.add_argument("paths", nargs="*", metavar="PATH", help="source files or directories")
    sources.set_defaults(handler=_sources)

    schema = subparsers.add_parser("schema", help="write (or --check) include/sources/source.schema.json")
    schema.add_argument("--check", action="store_true", help="exit 1 if the committed schema is stale")
    schema.add_argument("--output", type=Path, help="where to write (default: the sources directory)")
    schema.set_defaults(handler=_schema)


def _load(paths: list[str]) -> SourceSet:
    return load_source_paths(paths or [default_directory()])


def _validate(args: argparse.Namespace) -> int:
    result = _load(args.paths)
    for problem in iter_problems(result.errors):
        print(problem)
    if not args.quiet:
        files = len(result.sources) + len({error.file for error in result.errors})
        print(f"{files} file(s): {len(result.sources)} valid, {len(result.errors)} with problems",
              file=sys.stderr)
    return 1 if result.errors else 0


def _sources(args: argparse.Namespace) -> int:
    result = _load(args.paths)
    header = ("SOURCE", "SCHEDULE", "QUEUE", "RENDER", "ACTIVE", "PER MIN", "BATCH", "LAG", "RETRIES", "FILE")
    rows = [header]
    for name, source in sorted(result.sources.items()):
        rows.append((
            name, str(source.schedule), source.queue, source.render,
            str(source.rate_limit.max_active), str(source.rate_limit.per_minute),
            f"{source.batch.size}x{source.batch.max_packages}", format_duration(source.harvesting_lag),
            str(source.retries), result.files[name].name,
        ))
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    for problem in iter_problems(result.errors):
        print(problem, file=sys.stderr)
    return 1 if result.errors else 0


def _schema(args: argparse.Namespace) -> int:
    from harvester.config.schema import render_schema, schema_path, write_schema

    path = args.output or schema_path()
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != render_schema():
            print(f"{path} is stale: run `harvester schema` and commit it", file=sys.stderr)
            return 1
        print(f"{path} is current")
        return 0
    print(f"{path} {'written' if write_schema(path) else 'already current'}")
    return 0
