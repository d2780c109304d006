"""`harvester pageslots-queues`: the Celery queues a page-slot worker consumes, for its `-Q` option.

`make run` and docker compose start the pageslots worker with this list, so every country that has
a browser source (``pageslots.<COUNTRY>``, where the distributor publishes) has a consumer.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    queues = subparsers.add_parser(
        "pageslots-queues", help="print the Celery queues of the page-slot workers (pageslots,pageslots.<COUNTRY>...)"
    )
    queues.add_argument("--sources-dir", default=None, help="source YAML directory (default: HARVESTER_SOURCES_DIR)")
    queues.set_defaults(handler=_queues)


def _queues(args: argparse.Namespace) -> int:
    from harvester.config.loader import load_sources
    from harvester.pageslots.host import page_slot_queues

    loaded = load_sources(args.sources_dir)
    for error in loaded.errors:  # a bad file is reported, but never hides the other sources' countries
        print(f"warning: {error}", file=sys.stderr)
    print(",".join(page_slot_queues(loaded.sources.values())))
    return 0
