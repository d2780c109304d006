"""`harvester slots`: the page slots by country and state, and the allocator's last decision.

`harvester pageslots-queues` prints the Celery queues a slot host consumes (``pageslots``).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    queues = subparsers.add_parser(
        "pageslots-queues", help="print the Celery queues of a slot host (pageslots)"
    )
    queues.add_argument("--sources-dir", default=None, help="source YAML directory (default: HARVESTER_SOURCES_DIR)")
    queues.set_defaults(handler=_queues)
    slots = subparsers.add_parser("slots", help="page slots by country and state, and the allocator's last decision")
    slots.add_argument("--json", action="store_true", help="print the slot records and the decision as JSON")
    slots.set_defaults(handler=_slots)


def _slots(args: argparse.Namespace) -> int:
    import json
    import time
    from collections import Counter
    from dataclasses import asdict

    from harvester.connections import redis_client
    from harvester.pageslots.manager import PageSlotManager
    from harvester.settings import get_settings

    settings = get_settings()
    client = redis_client(settings=settings)
    manager = PageSlotManager(client, settings)
    records = manager.registry.slots()
    decision = manager.last_decision()
    capacity = manager.hosts.live_capacity()
    census = manager.book.census()
    if args.json:
        print(json.dumps({"slots": [asdict(r) for r in records], "capacity": asdict(capacity),
                          "census": {c: asdict(v) for c, v in census.items()}, "last_decision": decision},
                         default=str, indent=2))
        return 0
    now = client.time()
    now_seconds = now[0] + now[1] / 1e6
    print(f"slot hosts: {capacity.hosts} live, capacity {capacity.slots} slots "
          f"(MAX_PAGE_SLOTS {settings.max_page_slots})")
    countries = sorted({r.country for r in records} | set(census))
    if not countries:
        print("no slots and no recent browser tasks")
    for country in countries:
        mine = [r for r in records if r.country == country]
        states = Counter(r.state.value for r in mine)
        tasks = census.get(country)
        work = (f"tasks pending {tasks.pending}, running {tasks.running}, completed {tasks.completed}, "
                f"oldest pending {tasks.oldest_pending_wait_seconds:.0f}s") if tasks else "no recent tasks"
        print(f"{country}: {len(mine)} slots ({', '.join(f'{n} {s}' for s, n in sorted(states.items())) or '-'}); "
              f"{work}")
        for r in sorted(mine, key=lambda r: r.id):
            beat = f"{now_seconds - r.heartbeat:.0f}s ago" if r.heartbeat else "never"
            orders = " deleting after its task" if r.retire else (f" moving to {r.next_country}" if r.next_country
                                                                   else "")
            print(f"  {r.id:<10} {r.state.value:<22} worker {r.worker or '-'} pid {r.process_id or '-'} "
                  f"browser {r.browser_pid or '-'} pages {r.pages_served} failures {r.consecutive_failures} "
                  f"heartbeat {beat}{orders}{f' ({r.reason})' if r.reason else ''}")
    if decision:
        age = time.time() - float(decision.get("at", 0))
        print(f"last allocation {age:.0f}s ago: {decision.get('story')}")
    else:
        print("no allocation yet")
    return 0


def _queues(args: argparse.Namespace) -> int:
    """Slot hosts consume only ``pageslots`` (host_page_slot tasks); browser tasks reach slots through
    per-country Redis lists, so the list no longer grows with the countries."""
    from harvester.queues import PAGESLOTS_QUEUE

    print(PAGESLOTS_QUEUE)
    return 0
