"""Re-harvest of an unchanged site against its first harvest, in one run (issue 23).

Starts its own redis-server, MongoDB (HARVESTER_MONGO_URI, else mongod, else the SecantusDB stand-in), the
demo site, a distributor and Celery workers on free loopback ports, then harvests the same 2,000 product
pages twice through the real stack (plan and produce as the DAG's tasks do, admission by the distributor,
fetch, extraction and storage by Celery workers, the run's report): the first run fetches every page in full,
the second sends If-None-Match / If-Modified-Since with the validators stored with each record and the site
(which honours them on every page of ``/inc/all/``) answers 304.

- ``reharvest_bytes_ratio`` (goal <= 0.1): body bytes the site sent in the second run / in the first
  (counted by the demo site);
- ``reharvest_time_ratio`` (goal <= 0.3): the second run's wall time / the first's, from planning until
  every package is finished;
- beside them: pages, records, ``records_not_modified``, ``bytes_saved`` (from the report), and each run's
  seconds and bytes, with the CPU of the workers and the distributor.

Usage: .venv/bin/python bench/reharvest.py [--pages 2000] [--latency-ms 20] [--concurrency 16] [--workers 2]
The JSON object on the last line carries every figure and ``mongo`` (which server answered).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pymongo
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "bench"))

from crawl import Processes, tree_cpu_seconds  # noqa: E402  (the bench's process helpers)


def demo_stats(site_url: str, client: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{site_url}/_inc/stats", timeout=10) as response:
        return json.load(response).get(client, {"statuses": {}, "body_bytes": 0})


def write_source(directory: Path, name: str, site_url: str, pages: int, concurrency: int) -> dict[str, Any]:
    document = {
        "name": name,
        "input": {"kind": "details", "seeds": [f"{site_url}/inc/all/product/{i}" for i in range(1, pages + 1)]},
        "attributes": {
            "sku": {"css": ".sku", "required": True}, "title": {"css": "h1.title"},
            "price": {"css": ".price", "type": "float"}, "stock": {"css": ".stock", "type": "int"},
            "in_stock": {"css": ".in-stock", "type": "bool"},
            "released": {"css": "time.released::attr(datetime)", "type": "date"},
            "image": {"css": "img.photo::attr(src)", "type": "url"},
            "tags": {"css": "li.tag", "type": "list[str]"}, "ratings": {"css": "li.rating", "type": "list[int]"},
            "description": {"css": ".description"},
        },
        "harvesting_lag": 0,  # the second run re-visits every page
        "batch": {"size": 500, "max_packages": 100},
        "rate_limit": {"max_active": concurrency, "per_minute": 1_000_000},
        "headers": {"X-Demo-Client": name},
        "robots": "ignore",
        "retries": 2, "timeout": 30,
    }
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return document


def harvest(settings: Any, source: Any, run_id: str, database: Any, redis_client: Any,
            timeout: float = 900) -> tuple[float, dict[str, Any]]:
    """plan -> produce -> the workers -> every package finished -> report; (seconds, report)."""
    from harvester.producer.planner import Planner, PlanOptions
    from harvester.producer.producer import Producer
    from harvester.producer.progress import RunMonitor

    started = time.perf_counter()
    Planner(database, None, database).plan(source, run_id, PlanOptions.for_source(source))
    Producer.from_settings(settings, database, redis_client).produce(source, run_id)
    monitor = RunMonitor(database, database, redis_client)
    deadline = started + timeout
    while not monitor.measure(source.name, source.output_collection, run_id).complete:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"run {run_id} did not finish in {timeout} s")
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    return seconds, monitor.report(source.name, source.output_collection, run_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    args = parser.parse_args()

    import redis
    from harvester.config.model import SourceConfig
    from harvester.services import readiness
    from harvester.services.mongo import choose_mongo
    from harvester.services.ports import LOOPBACK, free_port
    from harvester.settings import HarvesterSettings

    directory = Path(tempfile.mkdtemp(prefix="harvester-bench-reharvest-"))
    sources = directory / "sources"
    sources.mkdir()
    processes = Processes(directory)
    try:
        redis_port = free_port()
        redis_url = f"redis://{LOOPBACK}:{redis_port}/0"
        processes.start("redis", ["redis-server", "--bind", LOOPBACK, "--port", str(redis_port), "--save", "",
                                  "--appendonly", "no", "--dir", str(directory)])
        readiness.wait_until(lambda: readiness.redis_ping(redis_url), 20, "redis-server")
        choice = choose_mongo(free_port(), directory)
        if choice.command is not None:
            (directory / "mongod").mkdir()
            processes.start("mongo", choice.command)
            readiness.wait_until(lambda: readiness.mongo_ping(choice.uri), 90, choice.kind)
        site_port = free_port()
        site_url = f"http://{LOOPBACK}:{site_port}"
        processes.start("demo-site", [str(BIN / "harvester-demo-site"), "--port", str(site_port),
                                      "--latency-ms", str(args.latency_ms), "--slow-every", "0"])
        readiness.wait_until(lambda: readiness.tcp_open(LOOPBACK, site_port), 30, "demo site")
        database_name = "harvester_bench_reharvest"
        env = {**os.environ, "HARVESTER_REDIS_URL": redis_url, "HARVESTER_MONGO_URI": choice.uri,
               "HARVESTER_MONGO_DATABASE": database_name, "HARVESTER_SOURCES_DIR": str(sources),
               "HARVESTER_ALLOWED_PRIVATE_NETWORKS": f"{LOOPBACK}/32:{site_port}"}
        os.environ.update({key: value for key, value in env.items() if key.startswith("HARVESTER_")})
        settings = HarvesterSettings()
        mongo = pymongo.MongoClient(choice.uri, tz_aware=True)
        mongo.drop_database(database_name)
        database = mongo[database_name]
        client = redis.Redis.from_url(redis_url)
        name = "reharvest"
        source = SourceConfig.model_validate(write_source(sources, name, site_url, args.pages, args.concurrency))
        worker = processes.start("celery", [
            str(BIN / "celery"), "-A", "harvester.workers.celery_app", "worker", "-Q", "default", "-n", "bench@%h",
            "--concurrency", str(args.workers), "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
            "--without-heartbeat"], env)
        distributor = processes.start("distributor", [str(BIN / "harvester"), "distributor"], env)
        time.sleep(4)  # workers and the distributor start (not part of the measurement)
        print(f"MongoDB: {choice.describe()}; {args.pages} pages at {args.latency_ms:g} ms; concurrency "
              f"{args.concurrency}; {args.workers} Celery processes", file=sys.stderr)

        runs = []
        for number in (1, 2):
            before = demo_stats(site_url, name)
            cpu_before = tree_cpu_seconds([worker, distributor])
            seconds, report = harvest(settings, source, f"bench-run-{number}", database, client)
            after = demo_stats(site_url, name)
            statuses = {code: after["statuses"].get(code, 0) - before["statuses"].get(code, 0)
                        for code in set(after["statuses"]) | set(before["statuses"])}
            runs.append({"seconds": round(seconds, 3), "body_bytes": after["body_bytes"] - before["body_bytes"],
                         "statuses": statuses, "cpu_seconds": round(tree_cpu_seconds([worker, distributor])
                                                                     - cpu_before, 3),
                         "records_stored": report["records_stored"], "records_new": report["records_new"],
                         "records_not_modified": report["records_not_modified"],
                         "records_unchanged": report["records_unchanged"], "bytes_saved": report["bytes_saved"]})
            print(f"run {number}: {json.dumps(runs[-1])}", file=sys.stderr)
        first, second = runs
        result = {
            "pages": args.pages,
            "reharvest_bytes_ratio": round(second["body_bytes"] / max(1, first["body_bytes"]), 4),
            "reharvest_time_ratio": round(second["seconds"] / first["seconds"], 4),
            "first_run": first, "second_run": second,
            "latency_ms": args.latency_ms, "concurrency": args.concurrency, "workers": args.workers,
            "mongo": choice.kind,
        }
        print(json.dumps(result))
    finally:
        processes.stop_all()


if __name__ == "__main__":
    main()
