"""Crawl throughput: Harvester's whole path against Scrapy on the demo site, in one run.

Starts its own redis-server, MongoDB (HARVESTER_MONGO_URI, else mongod, else the SecantusDB stand-in)
and demo site on free loopback ports, and installs the Scrapy peer from bench/requirements.txt into
.venv when it is missing. Both crawlers run the same listing -> details crawl with the same concurrency
and the same link discovery and extraction code; pages are counted by the demo site itself.

- (a) crawl only: Harvester (distributor + Celery workers) with ``output_sink=discard`` against Scrapy
  with no item pipeline -> ``pages_per_s``, ``scrapy_pages_per_s``, ``ratio`` (goal >= 1.5); and against
  crawlee-python's ParselCrawler (bench/crawlee_peer.py, its default HTTP client, installed for the bench
  only under var/bench-peers/) -> ``crawlee_pages_per_s``, ``crawlee_ratio`` (goal >= 1),
  ``crawlee_cpu_ms_per_page`` beside ``cpu_ms_per_page`` (goal: ours no higher);
- (b) end to end with MongoDB: Harvester's data handler against Scrapy with a batched bulk-upsert item
  pipeline into the same MongoDB -> ``end_to_end_pages_per_s``, ``scrapy_end_to_end_pages_per_s``,
  ``end_to_end_ratio`` (goal >= 1);
- (c) the data handler's records/s against one ``insert_one`` per record -> ``bulk_vs_insert_one``
  (goal >= 10 on a real mongod);
- (d) the storage's ceiling: the records of (b) read back and written again by one raw ``bulk_write``
  of upserts into a fresh collection of the same MongoDB -> ``storage_ceiling_records_per_s``, and
  (b)'s records/s end to end against it -> ``storage_ceiling_ratio`` (goal >= 0.8); beside it what the
  machine's CPU allows: the CPU per stored page of (b) for Harvester, the demo site and MongoDB
  (``end_to_end_cpu_ms_per_page``, ``site_cpu_ms_per_page``, ``storage_cpu_ms_per_record``) and the
  ratio (b) could reach with every core (``cores``) flat out for those three
  (``storage_ceiling_ratio_cpu_bound``), and the ratio no crawler with ``concurrency`` requests of
  ``latency_ms`` in flight could pass (``storage_ceiling_ratio_concurrency_bound``);
- (e) the settle path near its ceiling (bench/settle.py): the worker's ending of a batch fed pre-fetched pages
  against raw unordered ``bulk_write``s of the same records, same servers -> ``settle_ceiling_ratio`` (goal >= 0.8)
  and the figures beside it (``settle_records_per_s``, ``raw_bulk_records_per_s``, ...);
- (f) a proxy pool's cost (bench/pool_overhead.py): the crawl only of a source with ``country: SG`` through a pool of
  two forward proxies against a pool of one -> ``pool_overhead_cpu`` (CPU per page over, minus 1; goal <= 0.05);
- (api) a GraphQL source behind POST against the same items as HTML detail pages, on a demo shop of its own
  (``--api-products``, 10,000 by default), both with the discard sink -> ``api_items_per_s``, ``html_items_per_s``,
  ``api_speedup`` (goal >= 20: the harvester's own pace); the API into MongoDB against the same server's
  raw upserts of the same records -> ``api_mongo_items_per_s``, ``api_raw_upserts_per_s``, ``api_mongo_vs_raw``
  (goal about 1). bench/api_speed.py's docstring says what each measures.
The listing's page size is raised above ``--per-page`` when the shop would be deeper than a source's
``listing.max_depth`` may say (50 pages after the first), so every ``--products`` finishes.

Usage: .venv/bin/python bench/crawl.py [--products 2000] [--per-page 100] [--concurrency 16]
       [--latency-ms 20] [--workers 2] [--publish-batch N] [--records 3000] [--repeat 2] [--parts crawl,api,pool]
       [--api-chains 8] [--api-products 10000] [--smoke]
``--smoke`` (CI: tests/test_benches.py): 40 products at 20 a page (the API part's shop too), one round, one Celery
process, 160 records, Scrapy and crawlee skipped (installing them takes minutes), so their figures and the ratios
over them are null.
Harvester runs with its default settings (``publish_batch_size`` 16 tasks per Celery message) unless
``--publish-batch`` says otherwise; the source's ``max_active`` is the peers' concurrency.
Each round runs the five crawls alternately; the best round of each is reported (the machine may be
shared, and a busy neighbour should not decide the ratio). ``cpu_ms_per_page`` is the CPU the crawler
side spent per page (Harvester: distributor + Celery workers; Scrapy, crawlee: their process).
The JSON object on the last line carries every figure and ``mongo`` (which server answered).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pymongo
import redis
import yaml
from api_speed import API_PRODUCTS, api_part, records_and_fresh_copy  # bench/api_speed.py, beside this file
from pool_overhead import pool_overhead  # bench/pool_overhead.py, beside this file
from rig import (
    BIN,
    DEMO_PRODUCT_ATTRIBUTES,
    ROOT,
    Processes,
    bench_processes,
    deepest_listing,
    site_stats,
    start_demo_site,
    start_mongo,
    start_redis,
)
from settle import settle_ceiling  # bench/settle.py, beside this file

# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    # the API behind POST against HTML detail pages, both with the discard sink, and the API into MongoDB against the
    # same server's raw upserts (bench/api_speed.py)
    "api_items_per_s", "html_items_per_s", "api_speedup", "api_products", "api_chains", "api_first_request_s",
    "api_max_in_flight", "html_max_in_flight",
    "api_mongo_items_per_s", "api_raw_upserts_per_s", "api_mongo_vs_raw",
    "bench", "products", "repeat", "concurrency", "latency_ms", "workers", "publish_batch", "scrapy",
    "pages_per_s", "scrapy_pages_per_s", "ratio", "crawlee", "crawlee_pages_per_s", "crawlee_ratio",
    "end_to_end_pages_per_s", "scrapy_end_to_end_pages_per_s", "end_to_end_ratio", "max_concurrent_observed",
    "cpu_ms_per_page", "scrapy_cpu_ms_per_page", "crawlee_cpu_ms_per_page", "records_stored",
    "scrapy_records_stored", "bulk_records_per_s", "insert_one_records_per_s", "bulk_vs_insert_one",
    "end_to_end_records_per_s", "storage_ceiling_records_per_s", "storage_ceiling_ratio",
    # ceiling_bounds
    "cores", "end_to_end_cpu_ms_per_page", "site_cpu_ms_per_page", "storage_cpu_ms_per_record",
    "storage_ceiling_ratio_cpu_bound", "storage_ceiling_ratio_concurrency_bound",
    # settle_ceiling (bench/settle.py); its "mongo" is ours too
    "settle_records", "settle_batch_size", "settle_records_per_s", "raw_bulk_records_per_s",
    "settle_ceiling_ratio", "raw_one_write_records_per_s", "settle_one_write_ratio",
    "raw_key_index_only_records_per_s", "settle_cpu_ms_per_record",
    "mongo", "peers_skipped",
    # pool_overhead (bench/pool_overhead.py)
    "pool_overhead_cpu", "pool_one_proxy_cpu_ms_per_page", "pool_two_proxies_cpu_ms_per_page",
)


def ensure_scrapy() -> str:
    """Install the Scrapy peer (exact pin, constrained by the lock so nothing of ours moves)."""
    try:
        import scrapy
    except ImportError:
        subprocess.run([str(BIN / "pip"), "install", "-q", "-c", str(ROOT / "requirements.lock"),
                        "-r", str(ROOT / "bench" / "requirements.txt")], check=True)
        import scrapy
    return scrapy.__version__


def ensure_crawlee() -> tuple[str, Path]:
    """Install the crawlee peer into a bench-only directory (never .venv), constrained by our lock."""
    requirements = ROOT / "bench" / "requirements-crawlee.txt"
    pin = next(line for line in requirements.read_text().splitlines() if line.startswith("crawlee"))
    version = pin.split("==")[1]
    target = ROOT / "var" / "bench-peers" / f"crawlee-{version}"
    if not (target / "crawlee").is_dir():
        subprocess.run([str(BIN / "pip"), "install", "-q", "--target", str(target), "-c",
                        str(ROOT / "requirements.lock"), "-r", str(requirements)], check=True)
    return version, target


def tree_cpu_seconds(processes: list[subprocess.Popen]) -> float:
    """User + system CPU of processes and all their children (Celery's pool) so far."""
    import psutil

    total = 0.0
    for process in processes:
        try:
            root = psutil.Process(process.pid)
            for member in [root, *root.children(recursive=True)]:
                times = member.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def wait_until_ready(processes: Processes, worker: subprocess.Popen, distributor: subprocess.Popen, node: str,
                     broker_url: str, timeout: float = 180) -> None:
    """Until the distributor has started its rounds, the Celery worker answers a ping and both have gone quiet
    (its pool's processes built their batch runner at start: imports, clients): starting is not crawling.

    A fixed pause did not do: on a loaded machine the distributor logged its start 4 s after the clock had
    started, and the first request of the API's chain went out 22 s after its first task was pushed, a cost
    that weighs on a 6 s run many times more than on a 25 s one."""
    from celery import Celery

    deadline = time.monotonic() + timeout
    log = processes.directory / f"distributor-{node.split('@')[0]}.log"
    control = Celery(broker=broker_url).control
    while time.monotonic() < deadline:
        started = log.exists() and b"distributor started" in log.read_bytes()
        if started and control.ping(destination=[node], timeout=1.0):
            break
        time.sleep(0.2)
    while time.monotonic() < deadline:  # quiet: under a tenth of a core over half a second
        before = tree_cpu_seconds([worker, distributor])
        time.sleep(0.5)
        if tree_cpu_seconds([worker, distributor]) - before < 0.05:
            return
    print(f"{node}: not ready after {timeout:g}s, measured anyway", file=sys.stderr)


def listing_per_page(products: int, per_page: int) -> int:
    """``per_page``, or more when the demo shop's listing of ``products`` would be deeper than a source may follow
    (``deepest_listing``): at 100 a page and a depth of 50, above 5,100 products the crawl never finished."""
    return max(per_page, -(-products // (deepest_listing() + 1)))


def write_source(directory: Path, name: str, site_url: str, per_page: int, concurrency: int) -> Path:
    document = {
        "name": name,
        "input": {"seeds": [f"{site_url}/shop?per_page={per_page}"], "kind": "listing"},
        "listing": {"link_selectors": ["a.product-link", "a.more"], "next_page_selectors": ["a.next"],
                    "follow": r"^http://127\.0\.0\.1:\d+/product/\d+$", "max_depth": deepest_listing(),
                    "max_new_urls": 1_000_000},
        "attributes": DEMO_PRODUCT_ATTRIBUTES,
        "rate_limit": {"max_active": concurrency, "per_minute": 1_000_000},
        "headers": {"X-Demo-Client": name},
        "retries": 2, "timeout": 30,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def run_harvester(processes: Processes, env: dict[str, str], source_path: Path, site_url: str,
                  expected_pages: int, workers: int, rig: dict[str, subprocess.Popen] | None = None,
                  timeout: float = 900, first_tasks: list[Any] | None = None) -> dict[str, Any]:
    """Distributor + Celery workers; time from pushing the seed until the site served every page.

    ``rig`` names the bench's own servers (demo site, MongoDB) whose CPU over the same interval is
    returned as ``rig_cpu_seconds``: what the machine spent serving the crawl rather than crawling. ``pushed_at``: when
    the first tasks were pushed, on the demo site's clock (``time.monotonic``), to read its request times against."""
    from harvester.config.loader import load_source_file
    from harvester.distributor import Intake, RateLimitStore, TaskMessage
    from harvester.settings import HarvesterSettings

    settings = HarvesterSettings(**{key[len("HARVESTER_"):].lower(): value for key, value in env.items()
                                    if key.startswith("HARVESTER_")})
    source = load_source_file(source_path)
    client = redis.Redis.from_url(settings.redis_url)
    client.flushall()
    name = source.name
    worker = processes.start(f"celery-{name}", [
        str(BIN / "celery"), "-A", "harvester.workers.celery_app", "worker", "-Q", "default", "-n", f"{name}@%h",
        "--concurrency", str(workers), "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
        "--without-heartbeat"], env)
    distributor = processes.start(f"distributor-{name}", [str(BIN / "harvester"), "distributor"], env)
    wait_until_ready(processes, worker, distributor, f"{name}@{socket.gethostname()}", settings.redis_url)
    store = RateLimitStore(client, settings)
    rig = rig or {}
    cpu_before = tree_cpu_seconds([worker, distributor])
    rig_before = {name: tree_cpu_seconds([process]) for name, process in rig.items()}
    started, pushed_at = time.perf_counter(), time.monotonic()  # the demo site stamps requests by time.monotonic
    Intake(client, settings).push(source, first_tasks or [TaskMessage(source=name, kind="listing",
                                                                       url=source.input.seeds[0])])
    deadline = started + timeout
    while time.perf_counter() < deadline:
        stats = store.stats([name])[name]
        if stats.pending == 0 and stats.active == 0 and stats.delayed == 0 and \
                site_stats(site_url, name)["total"] >= expected_pages:
            break
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    cpu_seconds = tree_cpu_seconds([worker, distributor]) - cpu_before
    rig_cpu_seconds = {name: tree_cpu_seconds([process]) - rig_before[name] for name, process in rig.items()}
    observed = site_stats(site_url, name)
    counters = store.counters(name)
    processes.stop(distributor)
    processes.stop(worker)
    client.close()
    return {"pages": observed["total"], "seconds": seconds, "max_concurrent": observed["max_concurrent"],
            "records": counters.get("outcome:records_stored", 0), "cpu_seconds": cpu_seconds,
            "rig_cpu_seconds": rig_cpu_seconds, "pushed_at": pushed_at}


def run_peer(label: str, command: list[str], site_url: str, name: str, log_dir: Path, cwd: Path) -> dict[str, Any]:
    """Run one peer crawler's process; its JSON line, with pages and concurrency as the site counted them."""
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=cwd)
    (log_dir / f"{label.lower()}-{name}.log").write_text(completed.stderr)
    if completed.returncode != 0:
        raise RuntimeError(f"the {label} peer failed:\n{completed.stderr[-3000:]}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    observed = site_stats(site_url, name)
    return {**result, "pages": observed["total"], "max_concurrent": observed["max_concurrent"]}


def run_scrapy(source_path: Path, site_url: str, name: str, concurrency: int, mongo: tuple[str, str] | None,
               log_dir: Path) -> dict[str, Any]:
    command = [sys.executable, str(ROOT / "bench" / "scrapy_peer.py"), "--source-file", str(source_path),
               "--concurrency", str(concurrency)]
    if mongo is not None:
        command += ["--mongo-uri", mongo[0], "--database", mongo[1], "--collection", name]
    return run_peer("Scrapy", command, site_url, name, log_dir, ROOT)


def run_crawlee(peer_path: Path, source_path: Path, site_url: str, name: str, concurrency: int,
                log_dir: Path) -> dict[str, Any]:
    command = [sys.executable, str(ROOT / "bench" / "crawlee_peer.py"), "--peer-path", str(peer_path),
               "--source-file", str(source_path), "--concurrency", str(concurrency)]
    return run_peer("crawlee", command, site_url, name, log_dir, log_dir)


def bulk_against_insert_one(settings: Any, records: int) -> dict[str, float]:
    """(c) The data handler (one bulk_write per batch of 500) against insert_one per record."""
    from harvester.config.model import SourceConfig
    from harvester.storage.data_handler import DataHandler

    source = SourceConfig.model_validate({"name": "bench_records", "input": {"seeds": ["http://127.0.0.1/"]},
                                          "attributes": {"sku": {"css": ".sku"}}})
    client = pymongo.MongoClient(settings.mongo_uri)
    handler = DataHandler(settings, client)
    documents = [{"url": f"http://127.0.0.1/product/{i}", "sku": f"SKU-{i:05d}", "price": i / 100,
                  "tags": ["a", "b"], "released": datetime(2024, 1, 1, tzinfo=UTC)} for i in range(records)]
    handler.collection(source)  # the unique index exists before timing, as in a running harvest
    started = time.perf_counter()
    for start in range(0, records, 500):
        handler.write(source, documents[start:start + 500], "bench")
    bulk_seconds = time.perf_counter() - started
    single = client[settings.mongo_database]["bench_insert_one"]
    single.create_index("url", unique=True)
    one_by_one = documents[: max(200, records // 5)]  # enough for a stable rate without minutes of waiting
    started = time.perf_counter()
    for document in one_by_one:
        single.insert_one({**document, "harvested_at": datetime.now(UTC)})
    single_seconds = time.perf_counter() - started
    client.close()
    bulk_rate, single_rate = records / bulk_seconds, len(one_by_one) / single_seconds
    return {"bulk_records_per_s": bulk_rate, "insert_one_records_per_s": single_rate,
            "bulk_vs_insert_one": bulk_rate / single_rate}


def storage_ceiling(uri: str, database: str, collection: str) -> dict[str, float]:
    """(d) The same records, raw: one unordered ``bulk_write`` of upserts on the output key (what our data
    handler does, without anything else) into a fresh collection with the same unique index."""
    from pymongo import ReplaceOne

    client = pymongo.MongoClient(uri)
    records, target = records_and_fresh_copy(client, database, collection, "ceiling", "url")
    started = time.perf_counter()
    target.bulk_write([ReplaceOne({"url": record["url"]}, record, upsert=True) for record in records], ordered=False)
    seconds = time.perf_counter() - started
    client.close()
    return {"records": len(records), "records_per_s": len(records) / seconds if seconds > 0 else 0.0}


def ceiling_bounds(run: dict[str, Any], records: int, ceiling_records_per_s: float, concurrency: int,
                   latency_ms: float) -> dict[str, Any]:
    """What bounds (d) on this machine, whatever the write path does.

    - CPU: per stored page of the end-to-end run, the CPU of Harvester (distributor + workers), of the
      demo site and of MongoDB, and the share of the ceiling the crawl could reach if every core worked
      flat out for those three (``storage_ceiling_ratio_cpu_bound``; None when MongoDB runs elsewhere);
    - concurrency: no crawler keeping at most ``concurrency`` requests of ``latency_ms`` in flight stores
      faster than ``concurrency / latency`` pages a second (``storage_ceiling_ratio_concurrency_bound``).
    Below 0.8 either says the goal cannot be seen here."""
    cores = len(os.sched_getaffinity(0))
    rig = run.get("rig_cpu_seconds", {})
    pages = run["pages"] or 1
    ours = 1000 * run["cpu_seconds"] / pages
    site = 1000 * rig["site"] / pages if "site" in rig else None
    storage = 1000 * rig["storage"] / records if "storage" in rig and records else None
    cpu_ratio = concurrency_ratio = None
    if ceiling_records_per_s:
        if site is not None and storage is not None:
            cpu_ratio = round(min(1.0, cores * 1000 / (ours + site + storage) / ceiling_records_per_s), 3)
        if latency_ms > 0:
            concurrency_ratio = round(min(1.0, concurrency * 1000 / latency_ms / ceiling_records_per_s), 3)
    return {"cores": cores, "end_to_end_cpu_ms_per_page": round(ours, 3),
            "site_cpu_ms_per_page": None if site is None else round(site, 3),
            "storage_cpu_ms_per_record": None if storage is None else round(storage, 3),
            "storage_ceiling_ratio_cpu_bound": cpu_ratio, "storage_ceiling_ratio_concurrency_bound": concurrency_ratio}


def rate_of(run: dict[str, Any] | None) -> float | None:
    """Pages a second of a run, or None for a peer that did not run (``--smoke``)."""
    return None if run is None else run["pages"] / run["seconds"]


def over(ours: float, peer: float | None) -> float | None:
    return None if not peer else round(ours / peer, 3)


def cpu_ms_per_page(run: dict[str, Any] | None) -> float | None:
    return None if run is None else round(1000 * run["cpu_seconds"] / run["pages"], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--products", type=int, default=2000, help="the demo shop's size for the crawl and pool parts")
    parser.add_argument("--per-page", type=int, default=100,
                        help="listing page size (raised when the listing would be deeper than a source may follow)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--publish-batch", type=int, default=None,
                        help="tasks per Celery message (default: Harvester's publish_batch_size)")
    parser.add_argument("--records", type=int, default=3000, help="records for the bulk vs insert_one part")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the best of each is reported")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    parser.add_argument("--parts", default="crawl,api,pool",
                        help="crawl (a-e, against Scrapy and crawlee), api (the GraphQL endpoint against HTML detail "
                             "pages), pool (f: a pool of two proxies against one), or several (all: the default)")
    parser.add_argument("--api-chains", type=int, default=8,
                        help="the API part's cursor chains side by side: K first requests, segment 0..K-1 of K")
    parser.add_argument("--api-products", type=int, default=API_PRODUCTS,
                        help="the API part's demo shop size (its own site: long enough a run to be past start-up)")
    parser.add_argument("--smoke", action="store_true", help="40 products, one round, no peers (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.products, args.per_page, args.repeat, args.workers, args.records = 40, 20, 1, 1, 160
        args.api_products = 40
    parts = set(args.parts.split(","))

    from harvester.services.ports import LOOPBACK
    from harvester.settings import HarvesterSettings

    peers = "crawl" in parts and not args.smoke  # the smoke run skips the peers: installing them takes minutes
    scrapy_version = ensure_scrapy() if peers else None
    crawlee_version, crawlee_path = ensure_crawlee() if peers else (None, None)
    with bench_processes("crawl", keep=args.keep) as processes:
        directory, sources = processes.directory, processes.sources
        redis_url = start_redis(processes)
        choice, storage = start_mongo(processes)
        rig: dict[str, subprocess.Popen] = {"storage": storage} if storage is not None else {}
        per_page = listing_per_page(args.products, args.per_page)
        rig["site"], site_port, site_url = start_demo_site(
            processes, "--products", str(args.products), "--per-page", str(per_page),
            "--latency-ms", str(args.latency_ms), "--slow-every", "0")
        listing_pages = -(-args.products // per_page)
        expected = args.products + listing_pages
        database = "harvester_bench_crawl"
        publish_batch = args.publish_batch or HarvesterSettings().publish_batch_size
        env = {**os.environ, "HARVESTER_REDIS_URL": redis_url, "HARVESTER_MONGO_URI": choice.uri,
               "HARVESTER_MONGO_DATABASE": database, "HARVESTER_SOURCES_DIR": str(sources),
               "HARVESTER_PUBLISH_BATCH_SIZE": str(publish_batch),
               # the bench's demo site is on loopback, which the fetcher refuses unless allow-listed: its port only
               "HARVESTER_ALLOWED_PRIVATE_NETWORKS": f"{LOOPBACK}/32:{site_port}"}
        settings = HarvesterSettings(redis_url=redis_url, mongo_uri=choice.uri, mongo_database=database)
        pymongo.MongoClient(choice.uri).drop_database(database)
        print(f"MongoDB: {choice.describe()}", file=sys.stderr)
        print(f"demo site: {args.products} products, {listing_pages} listing pages, {args.latency_ms:g} ms/page; "
              f"concurrency {args.concurrency}; {args.workers} Celery processes, {publish_batch} tasks a message; "
              f"Scrapy {scrapy_version}; crawlee {crawlee_version}", file=sys.stderr)

        def source(name: str) -> Path:
            return write_source(sources, name, site_url, per_page, args.concurrency)

        def html_source(name: str, shop_url: str, products: int) -> tuple[Path, int]:
            """The listing -> details source over another demo shop of ``products``, and the pages it fetches."""
            shop_per_page = listing_per_page(products, args.per_page)
            return (write_source(sources, name, shop_url, shop_per_page, args.concurrency),
                    products + -(-products // shop_per_page))

        result: dict[str, Any] = {"bench": "crawl", "products": args.products, "repeat": args.repeat,
                                  "concurrency": args.concurrency, "latency_ms": args.latency_ms,
                                  "workers": args.workers, "publish_batch": publish_batch, "smoke": args.smoke}
        if "api" in parts:
            result.update(api_part(processes, env, args, run_harvester, html_source))
        if "pool" in parts:
            result.update(pool_overhead(processes, env, source, site_url, expected, args.workers, args.repeat,
                                        run_harvester))
        if "crawl" not in parts:
            print(json.dumps({**result, "mongo": choice.kind}))
            return

        runs: dict[str, list[dict[str, Any]]] = {"ours": [], "peer": [], "crawlee": [], "ours_e2e": [], "peer_e2e": []}
        stored = pymongo.MongoClient(choice.uri)[database]
        for round_number in range(1, args.repeat + 1):  # alternate, so load from other programs hits both
            suffix = f"_{round_number}"
            runs["ours"].append(run_harvester(
                processes, {**env, "HARVESTER_OUTPUT_SINK": "discard"}, source(f"ours_discard{suffix}"),
                site_url, expected, args.workers))
            if scrapy_version is not None:
                runs["peer"].append(run_scrapy(source(f"scrapy_plain{suffix}"), site_url, f"scrapy_plain{suffix}",
                                               args.concurrency, None, directory))
            if crawlee_path is not None:
                runs["crawlee"].append(run_crawlee(crawlee_path, source(f"crawlee_plain{suffix}"), site_url,
                                                   f"crawlee_plain{suffix}", args.concurrency, directory))
            runs["ours_e2e"].append(run_harvester(
                processes, {**env, "HARVESTER_OUTPUT_SINK": "mongo"}, source(f"ours_mongo{suffix}"),
                site_url, expected, args.workers, rig))
            runs["ours_e2e"][-1]["stored"] = stored[f"ours_mongo{suffix}"].count_documents({})
            if scrapy_version is not None:
                runs["peer_e2e"].append(run_scrapy(source(f"scrapy_mongo{suffix}"), site_url,
                                                   f"scrapy_mongo{suffix}", args.concurrency,
                                                   (choice.uri, database), directory))
                runs["peer_e2e"][-1]["stored"] = stored[f"scrapy_mongo{suffix}"].count_documents({})
        best = {name: max(results, key=lambda run: run["pages"] / run["seconds"], default=None)
                for name, results in runs.items()}
        ours, peer, ours_e2e, peer_e2e = best["ours"], best["peer"], best["ours_e2e"], best["peer_e2e"]
        crawlee = best["crawlee"]
        ours_records, peer_records = ours_e2e["stored"], peer_e2e and peer_e2e["stored"]
        records = bulk_against_insert_one(settings, args.records)
        best_e2e_round = runs["ours_e2e"].index(ours_e2e) + 1
        ceiling = storage_ceiling(choice.uri, database, f"ours_mongo_{best_e2e_round}")
        settle = settle_ceiling(redis_url, choice.uri, database, args.records, publish_batch, site_url=site_url)
        ours_records_per_s = ours_records / ours_e2e["seconds"]
        bound = ceiling_bounds(ours_e2e, ours_records, ceiling["records_per_s"], args.concurrency, args.latency_ms)
        rate = {name: rate_of(run) for name, run in best.items()}
        for label, run in (("Harvester, discard sink", ours), ("Scrapy, no pipeline", peer),
                           ("crawlee ParselCrawler", crawlee),
                           ("Harvester, MongoDB", ours_e2e), ("Scrapy, bulk-upsert pipeline", peer_e2e)):
            if run is None:
                print(f"{label:32s} skipped (--smoke)", file=sys.stderr)
                continue
            print(f"{label:32s} {run['pages']:6d} pages in {run['seconds']:7.2f} s = "
                  f"{run['pages'] / run['seconds']:8.1f} pages/s (max {run['max_concurrent']} in flight), "
                  f"{1000 * run['cpu_seconds'] / run['pages']:5.2f} ms CPU/page",
                  file=sys.stderr)
        for name, results in runs.items():
            print(f"  {name:9s} pages/s per round: " + ", ".join(f"{r['pages'] / r['seconds']:.1f}" for r in results),
                  file=sys.stderr)
        print(f"records stored: Harvester {ours_records}, Scrapy {peer_records} (expected {args.products})",
              file=sys.stderr)
        print(f"data handler {records['bulk_records_per_s']:.0f} records/s, insert_one "
              f"{records['insert_one_records_per_s']:.0f} records/s", file=sys.stderr)
        print(f"end to end {ours_records_per_s:.0f} records/s; raw bulk_write of the same {ceiling['records']} "
              f"records {ceiling['records_per_s']:.0f} records/s", file=sys.stderr)
        if bound["storage_ceiling_ratio_cpu_bound"] is not None:
            print(f"CPU per stored page: Harvester {bound['end_to_end_cpu_ms_per_page']:.2f} ms, demo site "
                  f"{bound['site_cpu_ms_per_page']:.2f} ms, MongoDB {bound['storage_cpu_ms_per_record']:.2f} ms; "
                  f"with all {bound['cores']} cores flat out the crawl reaches at most "
                  f"{bound['storage_ceiling_ratio_cpu_bound']:.2f} of the ceiling", file=sys.stderr)
        result |= {
            "scrapy": scrapy_version,
            "pages_per_s": round(rate["ours"], 1), "scrapy_pages_per_s": rate["peer"] and round(rate["peer"], 1),
            "ratio": over(rate["ours"], rate["peer"]),
            "crawlee": crawlee_version, "crawlee_pages_per_s": rate["crawlee"] and round(rate["crawlee"], 1),
            "crawlee_ratio": over(rate["ours"], rate["crawlee"]),
            "end_to_end_pages_per_s": round(rate["ours_e2e"], 1),
            "scrapy_end_to_end_pages_per_s": rate["peer_e2e"] and round(rate["peer_e2e"], 1),
            "end_to_end_ratio": over(rate["ours_e2e"], rate["peer_e2e"]),
            "max_concurrent_observed": max(ours["max_concurrent"], ours_e2e["max_concurrent"]),
            "cpu_ms_per_page": cpu_ms_per_page(ours),
            "scrapy_cpu_ms_per_page": cpu_ms_per_page(peer),
            "crawlee_cpu_ms_per_page": cpu_ms_per_page(crawlee),
            "records_stored": ours_records, "scrapy_records_stored": peer_records,
            "bulk_records_per_s": round(records["bulk_records_per_s"], 1),
            "insert_one_records_per_s": round(records["insert_one_records_per_s"], 1),
            "bulk_vs_insert_one": round(records["bulk_vs_insert_one"], 2),
            "end_to_end_records_per_s": round(ours_records_per_s, 1),
            "storage_ceiling_records_per_s": round(ceiling["records_per_s"], 1),
            "storage_ceiling_ratio": round(ours_records_per_s / ceiling["records_per_s"], 3)
            if ceiling["records_per_s"] else None,
            **bound,
            **settle,
            "mongo": choice.kind,
            "peers_skipped": ["scrapy", "crawlee"] if args.smoke else [],
        }
        print(json.dumps(result))


if __name__ == "__main__":
    main()
