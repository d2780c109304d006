"""`harvester stack run|stop|status` (what `make run`, `make stop` and `make status` call)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("stack", help="start, stop or show the local embedded stack")
    parser.add_argument("action", choices=["run", "stop", "status"])
    parser.add_argument("--no-trigger", action="store_true", help="do not trigger the demo DAG")
    parser.set_defaults(handler=_stack)


def _stack(args: argparse.Namespace) -> int:
    from harvester.services.stack import main

    return main([args.action, *(["--no-trigger"] if args.no_trigger else [])])
