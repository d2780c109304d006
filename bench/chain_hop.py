"""Where a hop of the API's chain goes: bench/api_speed.py's GraphQL source harvested by the batch runner in this
process (no distributor, no Celery: one delivery holds the whole chain, followed inside its batch), each part of
the pipeline timed per hop, and the CPU of reading one 50-item answer (``process_page``) on its own.

With ``--chains K`` the source has K first requests (segment 0..K-1 of K of the items) and the one batch holds all K
chains: the figures are then per round of hops (``hops`` counts every chain's pages).

Usage: PYTHONPATH=$PWD/include:$PWD/demo .venv/bin/python bench/chain_hop.py [--sink discard|mongo] [--products N]
       [--chains K]
Prints the per-hop figures, then one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from api_speed import PAGE_SIZE, first_request_tasks, write_graphql_source  # beside this file
from rig import bench_processes, start_demo_site, start_mongo, start_redis

NOT_A_BENCH = "a profiling driver of the API chain's hop (the batch runner in-process), for docs/benchmarks.md"
TIMED = {"runner": ("process", "settle", "count", "follow_listings"), "settler": ("settle_items",),
         "chains": ("continue_all",), "loop": ("run_until_complete",)}


def timed(owner: Any, name: str, seconds: dict[str, float]) -> None:
    """Wrap ``owner.name`` so its wall time adds up in ``seconds[name]``."""
    original: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - started

    setattr(owner, name, wrapper)


def reading_cpu_ms(source_path: Any, pages: int = 40) -> float:
    """CPU of ``process_page`` on one 50-item answer of the demo endpoint, best of five runs of ``pages``."""
    from harvester.config.loader import load_source_file
    from harvester.scraping import FetchResult, process_page
    from harvester_demo.api_requests import cursor_of
    from harvester_demo.app import product_facts
    from harvester_demo.structured import api_item

    source = load_source_file(source_path)
    seed = source.input.requests[0]
    edges = [{"cursor": cursor_of(number + 1), "node": {**api_item(number, product_facts(number))}}
             for number in range(PAGE_SIZE)]
    body = json.dumps({"data": {"products": {"edges": edges, "pageInfo": {"endCursor": cursor_of(PAGE_SIZE),
                                                                          "hasNextPage": True}}}})
    fetch = FetchResult(url=seed.url, outcome="ok", final_url=seed.url, status=200, text=body,
                        content_type="application/json", size=len(body))
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        for _ in range(pages):
            page = process_page(source, "listing", seed.url, 0, fetch, request=seed.request)
        best = min(best, (time.process_time() - started) / pages)
    assert page.listing_records is not None and len(page.listing_records.records) == PAGE_SIZE
    return 1000 * best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sink", choices=["discard", "mongo"], default="discard")
    parser.add_argument("--products", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=1, help="cursor chains side by side in the one batch")
    args = parser.parse_args()
    with bench_processes("chain-hop") as processes:
        redis_url = start_redis(processes)
        choice, _ = start_mongo(processes)
        _, port, site = start_demo_site(processes, "--products", str(args.products), "--latency-ms", "20",
                                        "--slow-every", "0")
        os.environ.update({"HARVESTER_REDIS_URL": redis_url, "HARVESTER_MONGO_URI": choice.uri,
                           "HARVESTER_MONGO_DATABASE": "chain_hop", "HARVESTER_OUTPUT_SINK": args.sink,
                           "HARVESTER_ALLOWED_PRIVATE_NETWORKS": f"127.0.0.1/32:{port}"})
        import redis
        from harvester.config.loader import load_source_file
        from harvester.distributor import Intake, RateLimitStore
        from harvester.settings import HarvesterSettings
        from harvester.workers.batch import BatchRunner

        settings = HarvesterSettings()
        path = write_graphql_source(processes.sources, "chain_hop", site, 16, args.chains)
        client = redis.Redis.from_url(redis_url)
        Intake(client, settings).push(load_source_file(path), first_request_tasks(path))
        store = RateLimitStore(client, settings)
        admission = store.admit("chain_hop", args.chains)
        store.mark_published("chain_hop", admission.leases())
        runner = BatchRunner(settings)
        seconds: dict[str, float] = defaultdict(float)
        owners = {"runner": runner, "settler": runner.settler, "chains": runner.chains, "loop": runner.loop}
        for owner, names in TIMED.items():
            for name in names:
                timed(owners[owner], name, seconds)
        started, cpu_started = time.perf_counter(), time.process_time()
        report = runner.run(admission.deliveries())
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        runner.close()
        hops = report["outcomes"].get("chain_continued", 0) + args.chains
        records = report["outcomes"].get("records_stored", 0)
        result = {"sink": args.sink, "mongo": choice.kind, "chains": args.chains, "hops": hops, "records": records,
                  "hop_ms": round(1000 * wall / hops, 1), "hop_cpu_ms": round(1000 * cpu / hops, 1),
                  "items_per_s": round(records / wall, 1),
                  "reading_cpu_ms_per_page": round(reading_cpu_ms(path), 2),
                  "load_average": round(os.getloadavg()[0], 1)}
        result |= {f"{name}_ms_per_hop": round(1000 * value / hops, 1) for name, value in seconds.items()}
        for name, value in sorted(seconds.items(), key=lambda pair: -pair[1]):
            print(f"{name:20s} {1000 * value / hops:7.1f} ms a hop", file=sys.stderr)
        print(json.dumps(result))


if __name__ == "__main__":
    main()
