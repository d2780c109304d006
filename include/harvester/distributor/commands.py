"""`harvester health distributor` and `harvester dead-letters list|show|requeue|purge`.

The long-running `harvester distributor` itself is composed with the page slots' hand-off and the
metrics endpoint, so it is registered by :mod:`harvester.processes` (the distributor imports neither).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

    from harvester.distributor.dead_letters import DeadLetter, DeadLetters
    from harvester.settings import HarvesterSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    health = subparsers.add_parser(
        "health", help="liveness check: exit 0 when the component's heartbeat is fresh, 1 when stale or missing"
    )
    health.add_argument("component", choices=["distributor"])
    health.add_argument("--name", default=None, help="the distributor's --name (default: this hostname)")
    health.add_argument("--max-age", type=float, default=90.0,
                        help="seconds a heartbeat may be old (default 90: a blocking wait lasts at most 30)")
    health.set_defaults(handler=_health)

    dead = subparsers.add_parser("dead-letters", help="inspect, re-queue or purge a source's dead letters")
    dead.add_argument("action", choices=["list", "show", "requeue", "purge"])
    dead.add_argument("--source", required=True)
    dead.add_argument("--limit", type=int, default=None, help="list: entries shown (20); requeue: at most this many")
    dead.add_argument("--json", action="store_true", help="list: one JSON entry per line")
    dead.add_argument("--task", help="show: the task id of the dead letter (list shows them with --json)")
    dead.add_argument("--out", default=".", help="show: where the page's snapshot is written (<task>.html, .jpg)")
    dead.set_defaults(handler=_dead_letters)


def _settings() -> HarvesterSettings:
    """This process's settings: each command is an entry point, and reads the environment once."""
    from harvester.settings import get_settings

    return get_settings()


def _redis_client(settings: HarvesterSettings) -> redis.Redis:
    from harvester.connections import REDIS_DEFAULT, redis_client

    return redis_client(REDIS_DEFAULT, settings=settings)


def _health(args: argparse.Namespace) -> int:
    """A container healthcheck: one GET, no Harvester state touched."""
    import socket
    import time

    from harvester.errors import StorageError, redis_storage_errors
    from harvester.redis_keys import distributor_heartbeat

    name = args.name or socket.gethostname()
    try:
        with redis_storage_errors():
            client = _redis_client(_settings())
            raw = client.get(distributor_heartbeat(name))
            client.close()
    except StorageError as error:
        cause = type(error.backend_error or error).__name__
        print(f"distributor {name}: Redis unreachable ({cause}: {error})", file=sys.stderr)
        return 1
    if raw is None:
        print(f"distributor {name}: no heartbeat", file=sys.stderr)
        return 1
    age = time.time() - float(raw)
    if age > args.max_age:
        print(f"distributor {name}: heartbeat {age:.0f}s old (limit {args.max_age:.0f}s)", file=sys.stderr)
        return 1
    print(f"distributor {name}: alive, heartbeat {age:.1f}s old")
    return 0


def _dead_letters(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from harvester.distributor.dead_letters import DeadLetters

    dead_letters = DeadLetters(_redis_client(_settings()))
    if args.action == "show":
        return _show_dead_letter(dead_letters, args)
    if args.action == "list":
        total = dead_letters.count(args.source)
        entries = dead_letters.list(args.source, limit=args.limit or 20)
        with_snapshot = set() if args.json else _with_snapshot(args.source, entries)
        for entry in entries:
            if args.json:
                print(json.dumps({"message": entry.message, "reason": entry.reason, "failed_at": entry.failed_at}))
                continue
            when = datetime.fromtimestamp(entry.failed_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
            message = entry.message if isinstance(entry.message, dict) else {}
            url = message.get("url", repr(entry.message)[:80])
            marker = "  [snapshot]" if message.get("task_id") in with_snapshot else ""
            print(f"{when}  attempt {message.get('attempt', '?')}  {message.get('task_id', '?')}  {url}  "
                  f"{entry.reason}{marker}")
        if not args.json:
            shown = f" (showing {len(entries)})" if total > len(entries) else ""
            print(f"{args.source}: {total} dead letters{shown}")
    elif args.action == "requeue":
        moved = dead_letters.requeue(args.source, args.limit)
        print(f"{args.source}: {moved} dead letters re-queued to intake, {dead_letters.count(args.source)} left")
    else:
        print(f"{args.source}: {dead_letters.purge(args.source)} dead letters purged")
    return 0


def _with_snapshot(source: str, entries: list[DeadLetter]) -> set[str]:
    """Task ids of ``entries`` whose page snapshot is kept (none when MongoDB cannot say: the dead letters
    live in Redis and are listed without it)."""
    from harvester.errors import ConnectionNotFound, StorageError
    from harvester.storage import SnapshotStore

    task_ids = [entry.message.get("task_id") for entry in entries if isinstance(entry.message, dict)]
    try:
        return SnapshotStore.from_settings(_settings()).existing(source, [t for t in task_ids if t])
    except (StorageError, ConnectionNotFound):  # no MongoDB configured or reachable: list without markers
        return set()


def _show_dead_letter(dead_letters: DeadLetters, args: argparse.Namespace) -> int:
    """One dead letter and the snapshot of its page (written to --out), the evidence of why it failed."""
    from datetime import UTC, datetime
    from pathlib import Path

    from harvester.storage import SnapshotStore

    if not args.task:
        print("harvester dead-letters show: give --task (the task id; `list` shows them)", file=sys.stderr)
        return 2
    letter = dead_letters.find(args.source, args.task)
    if letter is None:
        print(f"{args.source}: no dead letter of task {args.task}", file=sys.stderr)
        return 1
    message = letter.message if isinstance(letter.message, dict) else {}
    when = datetime.fromtimestamp(letter.failed_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
    print(f"task {args.task} of {args.source}: {message.get('url', '?')}")
    print(f"  failed {when} UTC after attempt {message.get('attempt', '?')}: {letter.reason}")
    snapshot = SnapshotStore.from_settings(_settings()).get(args.source, args.task)
    if snapshot is None:
        print("  no snapshot of the page (only failed browser pages and rejected pages keep one; snapshots expire)")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    html = out / f"{args.task}.html"
    html.write_text(snapshot.html)
    print(f"  snapshot taken {snapshot.taken_at:%Y-%m-%d %H:%M:%S} UTC of {snapshot.url}: {snapshot.reason}")
    print(f"  html ({len(snapshot.html.encode()):,} bytes): {html}")
    if snapshot.screenshot is not None:
        image = out / f"{args.task}.jpg"
        image.write_bytes(snapshot.screenshot)
        print(f"  screenshot ({len(snapshot.screenshot):,} bytes): {image}")
    return 0
