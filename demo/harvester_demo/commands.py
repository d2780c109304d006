"""`harvester-demo-site` (or `python -m harvester_demo`): serve the demo target site (what `make run`
starts and the examples point at)."""

from __future__ import annotations

import argparse

LOOPBACK = "127.0.0.1"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harvester-demo-site", description="serve the demo target site")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, default=8008)
    parser.add_argument("--products", type=int, default=500, help="detail pages in the catalogue")
    parser.add_argument("--per-page", type=int, default=20, help="products per listing page")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="delay of every listing and detail page")
    parser.add_argument("--slow-every", type=int, default=25, help="every Nth product is a slow page (0: none)")
    parser.add_argument("--slow-ms", type=float, default=300.0)
    parser.add_argument("--prepare-bombs", action="store_true",
                        help="build the hostile gzip bombs in the background at start (seconds of CPU), so their "
                             "first request is answered at once (the tests do; benches do not, they count our CPU)")
    return parser


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    from harvester_demo.app import DemoSite, create_app

    args = build_parser().parse_args(argv)
    site = DemoSite(products=args.products, per_page=args.per_page, latency_ms=args.latency_ms,
                    slow_every=args.slow_every, slow_ms=args.slow_ms)
    print(f"demo site on http://{args.host}:{args.port}/ ({args.products} products)", flush=True)
    if args.prepare_bombs:
        from harvester_demo.hostile import prepare_bombs

        prepare_bombs()
    uvicorn.run(create_app(site), host=args.host, port=args.port, log_level="warning",
                access_log=False, timeout_keep_alive=30)
    return 0
