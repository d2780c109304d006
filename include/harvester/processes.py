"""The long-running processes that need more than one component, composed here (an entry point, like
``cli``: no component imports it).

``harvester distributor`` runs :class:`harvester.distributor.Distributor` with the page slots' hand-off
(browser tasks to their country's slots) and serves the Prometheus metrics, which read through the
distributor's and the page slots' own readers. The distributor imports neither: it declares the hand-off
it needs (``BrowserHandoff``), and the metrics are served beside it, not by it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

    from harvester.distributor import Distributor
    from harvester.settings import HarvesterSettings

__all__ = ["distributor", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    service = subparsers.add_parser(
        "distributor", help="admit intake into the Celery queues within every source's global limits"
    )
    service.add_argument("--log-level", default="INFO")
    service.add_argument("--max-seconds", type=float, default=None, help="stop after this long (tests, benches)")
    service.add_argument("--name", default=None, help="the name its heartbeat is written under (default: hostname)")
    service.set_defaults(handler=_distributor)


def distributor(client: redis.Redis, settings: HarvesterSettings, **options: Any) -> Distributor:
    """A distributor that hands browser tasks to the page slots (``options``: the Distributor's others)."""
    from harvester.distributor import Distributor
    from harvester.pageslots import PageSlotHandoff

    return Distributor(client, settings, browser_handoff=PageSlotHandoff.from_settings(client, settings), **options)


def _distributor(args: argparse.Namespace) -> int:
    from harvester.connections import REDIS_DEFAULT, redis_client
    from harvester.distributor import MAX_WAIT_SECONDS
    from harvester.metrics import serve_metrics
    from harvester.settings import get_settings

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_settings()  # an entry point: the environment is read once, here
    service = distributor(redis_client(REDIS_DEFAULT, settings=settings), settings, name=args.name,
                          blocking_client=redis_client(REDIS_DEFAULT, settings=settings,
                                                       blocking_seconds=MAX_WAIT_SECONDS))
    serve_metrics(redis_client(REDIS_DEFAULT, settings=settings), settings)  # read from Redis at each scrape
    signal.signal(signal.SIGTERM, service.handle_signal)
    signal.signal(signal.SIGINT, service.handle_signal)
    service.run(max_seconds=args.max_seconds)
    return 0
