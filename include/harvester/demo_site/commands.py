"""`harvester demo-site`: serve the demo target site (what `make run` starts and the examples point at)."""

from __future__ import annotations

import argparse

from harvester.services.ports import LOOPBACK


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo-site", help="serve the demo target site on loopback")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, default=8008)
    parser.add_argument("--products", type=int, default=500, help="detail pages in the catalogue")
    parser.add_argument("--per-page", type=int, default=20, help="products per listing page")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="delay of every listing and detail page")
    parser.add_argument("--slow-every", type=int, default=25, help="every Nth product is a slow page (0: none)")
    parser.add_argument("--slow-ms", type=float, default=300.0)
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from harvester.demo_site.app import DemoSite, create_app

    site = DemoSite(products=args.products, per_page=args.per_page, latency_ms=args.latency_ms,
                    slow_every=args.slow_every, slow_ms=args.slow_ms)
    print(f"demo site on http://{args.host}:{args.port}/ ({args.products} products)", flush=True)
    uvicorn.run(create_app(site), host=args.host, port=args.port, log_level="warning",
                access_log=False, timeout_keep_alive=30)
    return 0
