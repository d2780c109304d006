"""Where a broad source's max_active places go: bench/broad.py's Harvester run alone, sampled every second.

Same loopback web, source and processes as bench/broad.py (its functions, not a copy), no peers. Each second one
JSON line on stderr: live pages served (and in that second), the source's places by lease state (``a`` admitted,
``q`` published and waiting in a Celery message, ``s`` started by a batch), places lent by slow requests, intake
and host queues, hosts ready now, hosts paused, Celery queue length (messages, most of them stale once refills took
their tasks over), and the running totals ``taken_over`` / ``stale_deliveries``. The last line on stdout: the run's
pace and counters. Little's law reads the bound off it: pages/s = places / seconds a page holds one, split by state.

Usage: PYTHONPATH=$PWD/include:$PWD/demo:$PWD/bench .venv/bin/python bench/broad_probe.py [--hosts 1000]
       [--pages 10] [--concurrency 64] [--workers 2] [--live-only] [--timeout 600] [--env HARVESTER_X=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

import redis
from broad import Web, page_urls, wait_for_live_pages, write_source  # beside this file
from crawl import tree_cpu_seconds
from harvester_demo import many_hosts
from harvester_demo.many_hosts import host_address, host_kind
from rig import BIN, bench_processes, start_mongo, start_redis

NOT_A_BENCH = "a diagnostic driver of bench/broad.py's Harvester run (places by lease state each second)"
SOURCE = "broad"  # bench/broad.py's write_source names it so


def sample(client: redis.Redis, web: Web, started: float, kinds: dict[str, str]) -> dict[str, Any]:
    """One second's figures (one pipelined round trip and the web's own count); ``kinds``: address -> host kind."""
    from harvester.redis_keys import SourceKeys

    keys = SourceKeys(SOURCE)
    now = time.time()
    pipeline = client.pipeline(transaction=False)
    pipeline.hvals(keys.leases).llen(keys.intake).get(keys.host_parked).zcount(keys.host_ready, "-inf", now)
    pipeline.zcard(keys.delayed).hlen(keys.host_paused).llen("default")
    pipeline.hmget(keys.counters, "admitted", "taken_over", "stale_deliveries", "done")
    pipeline.hgetall(keys.host_active_counts).zcard(keys.lent_places)
    leases, intake, parked, ready_now, delayed, hosts_paused, celery_queue, totals, per_host, lent = pipeline.execute()
    places_by_kind: dict[str, int] = {}  # a slow host's page holds its place up to the first-byte timeout
    for host, count in per_host.items():
        kind = kinds.get(host.decode().rsplit(":", 1)[0], "other")
        places_by_kind[kind] = places_by_kind.get(kind, 0) + int(count)
    states: dict[str, int] = {}
    for value in leases:
        state = value.decode()[0]
        states[state] = states.get(state, 0) + 1
    admitted, taken_over, stale, done = (int(total or 0) for total in totals)
    return {"t": round(time.perf_counter() - started, 1), "served": web.stats()["served"].get("normal", 0),
            "states": states, "lent": lent, "places_by_host_kind": places_by_kind, "intake": intake,
            "host_queued": int(parked or 0), "hosts_ready_now": ready_now,
            "delayed": delayed, "hosts_paused": hosts_paused, "celery_queue": celery_queue, "admitted": admitted,
            "taken_over": taken_over, "stale_deliveries": stale, "done": done}


def sample_until(stop: threading.Event, client: redis.Redis, web: Web, started: float, hosts: int) -> None:
    kinds = {host_address(index): host_kind(index) for index in range(hosts)}
    served = 0
    while not stop.is_set():
        row = sample(client, web, started, kinds)
        row["served_in_second"], served = row["served"] - served, row["served"]
        print(json.dumps(row), file=sys.stderr, flush=True)
        stop.wait(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--live-only", action="store_true", help="a web of the live hosts alone")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--env", action="append", default=[], help="HARVESTER_NAME=value for every process")
    args = parser.parse_args()
    live_pages = sum(host_kind(index) == "normal" for index in range(args.hosts)) * args.pages

    from harvester.config.loader import load_source_file
    from harvester.distributor import Intake, RateLimitStore, TaskMessage
    from harvester.settings import HarvesterSettings

    with bench_processes("broad-probe") as processes:
        redis_url = start_redis(processes)
        mongo, _ = start_mongo(processes)
        env = {**os.environ, "HARVESTER_REDIS_URL": redis_url, "HARVESTER_MONGO_URI": mongo.uri,
               "HARVESTER_MONGO_DATABASE": "harvester_bench_broad_probe",
               "HARVESTER_SOURCES_DIR": str(processes.sources), "HARVESTER_OUTPUT_SINK": "discard",
               "HARVESTER_ALLOWED_PRIVATE_NETWORKS": many_hosts.NETWORK}
        env.update(assignment.split("=", 1) for assignment in args.env)
        web = Web(processes, args.hosts, 10.0, live_only=args.live_only)
        urls = page_urls(web.port, args.hosts, args.pages)
        if args.live_only:
            urls = [url for index, url in enumerate(urls) if host_kind(index // args.pages) == "normal"]
        source = load_source_file(write_source(processes.sources, args.concurrency, urls[0]))
        settings = HarvesterSettings(**{key[len("HARVESTER_"):].lower(): value for key, value in env.items()
                                        if key.startswith("HARVESTER_")})
        client = redis.Redis.from_url(settings.redis_url)
        client.flushall()
        worker = processes.start("celery", [
            str(BIN / "celery"), "-A", "harvester.workers.celery_app", "worker", "-Q", "default", "-n",
            "broad-probe@%h", "--concurrency", str(args.workers), "--loglevel", "WARNING", "--without-gossip",
            "--without-mingle", "--without-heartbeat"], env)
        distributor = processes.start("distributor", [str(BIN / "harvester"), "distributor"], env)
        time.sleep(4)  # workers and the distributor start (not part of the measurement)
        web.reset()
        cpu_before = tree_cpu_seconds([worker, distributor])
        started = time.perf_counter()
        stop = threading.Event()
        sampler = threading.Thread(target=sample_until, args=(stop, client, web, started, args.hosts), daemon=True)
        sampler.start()
        Intake(client, settings).push(source, [TaskMessage(source=SOURCE, url=url) for url in urls])
        try:
            seconds = wait_for_live_pages(web, live_pages, args.timeout, [worker, distributor], started)
        finally:
            stop.set()
            sampler.join()
        cpu_seconds = tree_cpu_seconds([worker, distributor]) - cpu_before
        counters = RateLimitStore(client, settings).counters(SOURCE)
        violations = web.stats()["violations"]
        processes.stop(distributor)
        processes.stop(worker)
        client.close()
    print(json.dumps({"hosts": args.hosts, "pages_per_host": args.pages, "live_only": args.live_only,
                      "live_pages": live_pages, "seconds": round(seconds, 2),
                      "pages_per_s": round(live_pages / seconds, 2), "cpu_seconds": round(cpu_seconds, 1),
                      "politeness_violations": violations, "env": args.env, "counters": counters}))


if __name__ == "__main__":
    main()
