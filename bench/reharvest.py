"""Re-harvest of an unchanged site against its first harvest, in one run.

Starts its own redis-server, MongoDB (HARVESTER_MONGO_URI, else mongod, else the SecantusDB stand-in), the
demo site, a distributor and Celery workers on free loopback ports, then harvests the same unchanged 2,000
product pages twice through the real stack (plan and produce as the DAG's tasks do, admission by the
distributor, fetch, extraction and storage by Celery workers, the run's report), as two sources:

- ``reharvest_sitemap``, the set-up docs/sources.md recommends for a site with a sitemap: its sitemap index
  (10 gzip files with ``<lastmod>``) is the input, so the second run fetches the sitemaps and no page whose
  lastmod is not newer than its harvest; what it does fetch is asked for conditionally;
  ``reharvest_bytes_ratio`` (goal <= 0.1) and ``reharvest_time_ratio`` (goal <= 0.3) are this source's;
- ``reharvest_conditional``: the 2,000 URLs are seeds, so the second run fetches every page again with
  If-None-Match / If-Modified-Since and the site (which honours them on every page of ``/inc/all/``) answers
  304: ``conditional_only_bytes_ratio`` and ``conditional_only_time_ratio``.

Bytes are the body bytes the demo site sent (sitemaps included); time is each run's wall time from planning
until every package is finished. Each run's seconds, bytes, statuses, the CPU of the workers and the
distributor and the report's ``records_not_modified``, ``bytes_saved`` and ``sitemap_unchanged`` are beside
them.

Usage: .venv/bin/python bench/reharvest.py [--pages 2000] [--latency-ms 20] [--concurrency 16] [--workers 2] [--smoke]
``--smoke`` (CI: tests/test_benches.py): 40 pages, one Celery process, its directory removed after.
The JSON object on the last line carries every figure and ``mongo`` (which server answered).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from rig import DEMO_PRODUCT_ATTRIBUTES  # noqa: E402

# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "pages", "reharvest_bytes_ratio", "reharvest_time_ratio", "conditional_only_bytes_ratio",
    "conditional_only_time_ratio", "runs", "latency_ms", "concurrency", "workers", "mongo",
)


def demo_stats(site_url: str, client: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{site_url}/_inc/stats", timeout=10) as response:
        return json.load(response).get(client, {"statuses": {}, "body_bytes": 0})


def write_source(directory: Path, name: str, site_url: str, pages: int, concurrency: int,
                 sitemap: bool) -> dict[str, Any]:
    """``sitemap``: the site's sitemap index is the input (lastmod, then conditional requests for what is
    fetched); else the 2,000 product URLs are seeds (conditional requests alone)."""
    seeds = {"kind": "details", "seeds": [f"{site_url}/inc/all/product/{i}" for i in range(1, pages + 1)]}
    index = {"sitemaps": [f"{site_url}/inc/sitemap.xml?products={pages}&per_file=200&all=1"]}
    document = {
        "name": name,
        "input": index if sitemap else seeds,
        **({"listing": {"follow": r"/inc/all/product/\d+$", "max_new_urls": pages}} if sitemap else {}),
        "attributes": DEMO_PRODUCT_ATTRIBUTES,
        "harvesting_lag": 0,  # the second run re-visits every page
        "batch": {"size": 100, "max_packages": 100},  # the default package size
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
    from harvester.producer.progress import RunSettlement

    started = time.perf_counter()
    Planner(database, None, database).plan(source, run_id, PlanOptions.for_source(source))
    Producer.from_settings(settings, database, redis_client).produce(source, run_id)
    settlement = RunSettlement(database, database, redis_client)
    packages = database["packages"]
    deadline = started + timeout
    # what the sensor's trigger does, but every 0.2 s instead of every 15 s: settle dead letters, then ask
    # whether a package is unfinished (one indexed count, not the whole progress, so the poll costs MongoDB
    # next to nothing while the workers write)
    while True:
        settlement.settle(source.name, run_id)
        if packages.count_documents({"source": source.name, "run_id": run_id, "status": {"$ne": 1}}, limit=1) == 0:
            break
        if time.perf_counter() > deadline:
            raise RuntimeError(f"run {run_id} did not finish in {timeout} s")
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    return seconds, settlement.report(source.name, source.output_collection, run_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--smoke", action="store_true", help="40 pages, one Celery process (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.pages, args.workers = 40, 1

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
        worker = processes.start("celery", [
            str(BIN / "celery"), "-A", "harvester.workers.celery_app", "worker", "-Q", "default", "-n", "bench@%h",
            "--concurrency", str(args.workers), "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
            "--without-heartbeat"], env)
        distributor = processes.start("distributor", [str(BIN / "harvester"), "distributor"], env)
        time.sleep(4)  # workers and the distributor start (not part of the measurement)
        print(f"MongoDB: {choice.describe()}; {args.pages} pages at {args.latency_ms:g} ms; concurrency "
              f"{args.concurrency}; {args.workers} Celery processes", file=sys.stderr)

        scenarios: dict[str, list[dict[str, Any]]] = {}
        for name, sitemap in (("reharvest_sitemap", True), ("reharvest_conditional", False)):
            source = SourceConfig.model_validate(write_source(sources, name, site_url, args.pages,
                                                              args.concurrency, sitemap))
            runs = scenarios[name] = []
            for number in (1, 2):
                before = demo_stats(site_url, name)
                cpu_before = tree_cpu_seconds([worker, distributor])
                seconds, report = harvest(settings, source, f"bench-run-{number}", database, client)
                after = demo_stats(site_url, name)
                statuses = {code: after["statuses"].get(code, 0) - before["statuses"].get(code, 0)
                            for code in set(after["statuses"]) | set(before["statuses"])}
                runs.append({"seconds": round(seconds, 3), "body_bytes": after["body_bytes"] - before["body_bytes"],
                             "statuses": statuses,
                             "cpu_seconds": round(tree_cpu_seconds([worker, distributor]) - cpu_before, 3),
                             **{key: report.get(key) for key in (
                                 "records_stored", "records_new", "records_not_modified", "records_unchanged",
                                 "bytes_saved")},
                             "sitemap_unchanged": report.get("sitemaps", {}).get("sitemap_unchanged", 0)})
                print(f"{name} run {number}: {json.dumps(runs[-1])}", file=sys.stderr)

        def ratios(runs: list[dict[str, Any]]) -> tuple[float, float]:
            first, second = runs
            return (round(second["body_bytes"] / max(1, first["body_bytes"]), 4),
                    round(second["seconds"] / first["seconds"], 4))

        bytes_ratio, time_ratio = ratios(scenarios["reharvest_sitemap"])
        conditional_bytes, conditional_time = ratios(scenarios["reharvest_conditional"])
        result = {
            "pages": args.pages,
            "reharvest_bytes_ratio": bytes_ratio, "reharvest_time_ratio": time_ratio,
            "conditional_only_bytes_ratio": conditional_bytes, "conditional_only_time_ratio": conditional_time,
            "runs": scenarios, "latency_ms": args.latency_ms, "concurrency": args.concurrency,
            "workers": args.workers, "mongo": choice.kind,
        }
        print(json.dumps(result))
    finally:
        processes.stop_all()
        if args.smoke:  # the full run keeps its logs for a look after it
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
