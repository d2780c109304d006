"""Producer throughput and memory: plan + produce from a MongoDB input collection into Redis intake.

Starts its own redis-server and MongoDB (HARVESTER_MONGO_URI, else mongod, else the SecantusDB
stand-in) on free loopback ports. Measured in the same run:

- ``urls_per_s``: URLs planned into packages and pushed to intake per second (200,000 documents),
- ``raw_cursor_per_s``: a plain pymongo cursor over the same collection (URL field only),
- ``raw_push_per_s``: a plain Redis pipeline RPUSH of the same, already serialised, messages,
- ``ratio``: urls_per_s / the slower raw rate (goal: at least 0.5),
- ``memory_growth``: peak RSS of a producer process at 200,000 documents / at 20,000 (goal: <= 1.10).

Each producer measurement runs in a fresh child process so its peak RSS is its own.
Usage: .venv/bin/python bench/produce.py [--large 200000] [--small 20000] [--batch-size 1000] [--smoke]
``--smoke`` (CI: tests/test_benches.py): 2,000 and 500 documents.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pymongo
import redis

REPOSITORY = Path(__file__).resolve().parents[1]
SOURCE_NAME = "bench_produce"
# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "bench", "documents", "batch_size", "mongo", "urls_planned", "tasks_pushed", "seconds", "plan_seconds",
    "produce_seconds", "urls_per_s", "raw_cursor_per_s", "raw_push_per_s", "ratio", "peak_rss_small_kb",
    "peak_rss_large_kb", "memory_growth",
)


def _source(collection: str, batch_size: int, max_packages: int):
    from harvester.config.model import SourceConfig

    return SourceConfig.model_validate({
        "name": f"bench_{collection}",  # one source per input: runs of one source would continue each other
        "input": {"kind": "details", "mongo": {"collection": collection, "url_field": "url"}},
        "attributes": {"title": {"css": "h1::text"}},
        "batch": {"size": batch_size, "max_packages": max_packages},
        "harvesting_lag": "1d",
        "output": {"collection": f"{collection}_output"},
    })


def _peak_rss_kb() -> int:
    """This process's own peak RSS. Not ru_maxrss: Linux carries that across fork+exec from the parent."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(args: argparse.Namespace) -> None:
    """Plan and produce one run in this fresh process; print elapsed time and peak RSS."""
    from harvester.producer.planner import Planner, PlanOptions
    from harvester.producer.producer import Producer
    from harvester.settings import HarvesterSettings

    settings = HarvesterSettings(redis_url=args.redis_url, mongo_uri=args.mongo_uri, mongo_database=args.database)
    client = pymongo.MongoClient(args.mongo_uri)
    database = client[args.database]
    redis_client = redis.Redis.from_url(args.redis_url)
    source = _source(args.collection, args.batch_size, max_packages=100_000)
    run_id = f"bench-{args.collection}-{time.time_ns()}"
    started = time.perf_counter()
    plan = Planner(database, database, database).plan(source, run_id, PlanOptions.for_source(source))
    planned = time.perf_counter()
    produced = Producer.from_settings(settings, database, redis_client).produce(source, run_id)
    finished = time.perf_counter()
    print(json.dumps({
        "urls": plan.urls_planned, "pushed": produced.tasks_pushed, "packages": plan.packages_total,
        "seconds": finished - started, "plan_seconds": planned - started, "produce_seconds": finished - planned,
        "peak_rss_kb": _peak_rss_kb(),
    }))


def _run_child(args: argparse.Namespace, collection: str) -> dict:
    command = [sys.executable, __file__, "--child", "--redis-url", args.redis_url, "--mongo-uri", args.mongo_uri,
               "--database", args.database, "--collection", collection, "--batch-size", str(args.batch_size)]
    output = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPOSITORY).stdout
    return json.loads(output.strip().splitlines()[-1])


def _fill(database, collection: str, count: int) -> None:
    database[collection].drop()
    chunk = 10_000
    for start in range(0, count, chunk):
        database[collection].insert_many(
            [{"url": f"http://bench.example/product/{i}", "active": True, "n": i}
             for i in range(start, min(count, start + chunk))], ordered=False)


def _raw_cursor(database, collection: str) -> tuple[int, float]:
    started = time.perf_counter()
    count = sum(1 for document in database[collection].find({}, {"url": 1}, batch_size=2000) if document["url"])
    return count, time.perf_counter() - started


def _raw_push(redis_client: redis.Redis, urls: list[str]) -> tuple[int, float]:
    from harvester.distributor.messages import TaskMessage

    payloads = [TaskMessage(source=SOURCE_NAME, kind="details", url=url, run_id="raw", package_id=i // 1000).to_json()
                for i, url in enumerate(urls)]
    key = "bench:raw-push"
    redis_client.delete(key)
    started = time.perf_counter()
    for start in range(0, len(payloads), 10_000):
        pipeline = redis_client.pipeline(transaction=False)
        block = payloads[start:start + 10_000]
        for offset in range(0, len(block), 1000):
            pipeline.rpush(key, *block[offset:offset + 1000])
        pipeline.execute()
    elapsed = time.perf_counter() - started
    redis_client.delete(key)
    return len(payloads), elapsed


def _start_servers(directory: Path) -> tuple[str, str, str, list[subprocess.Popen]]:
    sys.path.insert(0, str(REPOSITORY / "include"))
    from harvester.services import readiness
    from harvester.services.mongo import choose_mongo
    from harvester.services.ports import LOOPBACK, free_port

    processes: list[subprocess.Popen] = []
    redis_port = free_port()
    redis_url = f"redis://{LOOPBACK}:{redis_port}/0"
    processes.append(subprocess.Popen(
        ["redis-server", "--bind", LOOPBACK, "--port", str(redis_port), "--dir", str(directory), "--save", "",
         "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    readiness.wait_until(lambda: readiness.redis_ping(redis_url), 20, "redis-server")
    choice = choose_mongo(free_port(), directory)
    if choice.command is not None:
        (directory / "mongod").mkdir(exist_ok=True)
        log = (directory / "mongo.log").open("wb")
        processes.append(subprocess.Popen(choice.command, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        readiness.wait_until(lambda: readiness.mongo_ping(choice.uri), 90, choice.kind)
    return redis_url, choice.uri, choice.kind, processes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=200_000)
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url")
    parser.add_argument("--mongo-uri")
    parser.add_argument("--database", default="bench_produce")
    parser.add_argument("--collection")
    parser.add_argument("--smoke", action="store_true", help="2,000 and 500 documents (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.large, args.small = 2000, 500
    if args.child:
        child(args)
        return

    directory = Path(tempfile.mkdtemp(prefix="bench-produce-"))
    processes: list[subprocess.Popen] = []
    try:
        args.redis_url, args.mongo_uri, mongo_kind, processes = _start_servers(directory)
        client = pymongo.MongoClient(args.mongo_uri)
        database = client[args.database]
        redis_client = redis.Redis.from_url(args.redis_url)
        print(f"filling input collections ({args.small} and {args.large} documents)...", file=sys.stderr)
        _fill(database, "input_small", args.small)
        _fill(database, "input_large", args.large)

        cursor_count, cursor_seconds = _raw_cursor(database, "input_large")
        urls = [document["url"] for document in database["input_large"].find({}, {"url": 1})]
        push_count, push_seconds = _raw_push(redis_client, urls)
        del urls

        small = _run_child(args, "input_small")
        redis_client.flushall()
        large = _run_child(args, "input_large")
        redis_client.flushall()

        raw_cursor_per_s = cursor_count / cursor_seconds
        raw_push_per_s = push_count / push_seconds
        urls_per_s = large["pushed"] / large["seconds"]
        result = {
            "bench": "produce",
            "documents": args.large,
            "batch_size": args.batch_size,
            "mongo": mongo_kind,
            "urls_planned": large["urls"],
            "tasks_pushed": large["pushed"],
            "seconds": round(large["seconds"], 3),
            "plan_seconds": round(large["plan_seconds"], 3),
            "produce_seconds": round(large["produce_seconds"], 3),
            "urls_per_s": round(urls_per_s, 1),
            "raw_cursor_per_s": round(raw_cursor_per_s, 1),
            "raw_push_per_s": round(raw_push_per_s, 1),
            "ratio": round(urls_per_s / min(raw_cursor_per_s, raw_push_per_s), 3),
            "peak_rss_small_kb": small["peak_rss_kb"],
            "peak_rss_large_kb": large["peak_rss_kb"],
            "memory_growth": round(large["peak_rss_kb"] / small["peak_rss_kb"], 3),
        }
        print(json.dumps(result))
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
