"""`harvester stack run|stop|status` (what `make run`, `make stop` and `make status` call)."""

from __future__ import annotations

import argparse
import contextlib


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("stack", help="start, stop or show the local embedded stack")
    parser.add_argument("action", choices=["run", "stop", "status"])
    parser.add_argument("--no-trigger", action="store_true", help="do not trigger the demo DAG")
    parser.set_defaults(handler=_stack)
    _register_forward_proxy(subparsers)
    from harvester.services import maintenance

    maintenance.register(subparsers)


def _stack(args: argparse.Namespace) -> int:
    from harvester.services.stack import main

    return main([args.action, *(["--no-trigger"] if args.no_trigger else [])])


def _register_forward_proxy(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("forward-proxy", help="a counting HTTP forward proxy on loopback (demo, tests)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--label", default="proxy", help="a name shown in its stats (e.g. the country)")
    parser.add_argument("--allow-any-upstream", action="store_true",
                        help="relay to any host (default: loopback upstreams only, as the demo and tests need)")
    parser.add_argument("--source-address", default=None,
                        help="the address upstream connections leave from (e.g. 127.0.0.2: its own exit address)")
    parser.set_defaults(handler=_forward_proxy)


def _forward_proxy(args: argparse.Namespace) -> int:
    import asyncio

    from harvester.services.forward_proxy import ForwardProxy

    print(f"forward proxy {args.label} on http://{args.host}:{args.port}/", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(ForwardProxy(args.label, args.allow_any_upstream, args.source_address).serve(args.host, args.port))
    return 0
