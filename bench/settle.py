"""The storage path near its ceiling: the worker's settle path fed pre-fetched pages.

``settle_ceiling`` runs the worker's own ending of a batch (``BatchRunner.finish``: extract every page, one
bulk upsert of the records, mark the URLs seen, count the packages down, release the leases, count the
outcomes) on pages already in memory (the demo site's product pages rendered in-process, no request
made), batch after batch of ``batch_size`` tasks (a Celery message's ``publish_batch_size``), and then
writes the same records raw, batch by batch right after each settled batch (so a busy neighbour slows both
sides alike): one unordered ``bulk_write`` of upserts on the output key per batch of the same size into a
fresh collection of the same MongoDB with the same indexes as the output (its unique key
index and the url index the URL store, the planner and conditional requests read).

- ``settle_records_per_s``: records per second through the settle path;
- ``raw_bulk_records_per_s``: the raw writes in batches of the same size;
- ``settle_ceiling_ratio``: the first over the second (goal >= 0.8);
- ``raw_one_write_records_per_s`` and ``settle_one_write_ratio``: against a single ``bulk_write`` of every
  record (what a loader with all records at hand could do; no worker holds more than its batch);
- ``raw_key_index_only_records_per_s``: the raw writes with the unique key index alone (what the url index costs);
- ``settle_cpu_ms_per_record``: this process's CPU per settled record (extraction and the clients).

bench/crawl.py calls it beside its crawls (same servers, same run); alone it starts its own redis-server
and MongoDB: ``.venv/bin/python bench/settle.py [--records 3000] [--batch 16] [--profile FILE] [--smoke]``;
``--smoke`` (CI: tests/test_benches.py): 160 records, one round.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "include", ROOT / "demo"):  # after PYTHONPATH: another checkout's core may be measured
    if str(path) not in sys.path:
        sys.path.append(str(path))
# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "settle_records", "settle_batch_size", "settle_records_per_s", "raw_bulk_records_per_s",
    "settle_ceiling_ratio", "raw_one_write_records_per_s", "settle_one_write_ratio",
    "raw_key_index_only_records_per_s", "settle_cpu_ms_per_record", "mongo",
)


def product_pages(site_url: str, count: int) -> list[tuple[str, str]]:
    """(url, html) of the demo site's product pages 1..count, rendered as the site renders them."""
    from harvester_demo.app import page, product_body, product_facts

    pages = []
    for number in range(1, count + 1):
        facts = product_facts(number)
        pages.append((f"{site_url}/product/{number}", page(facts["title"], product_body(number, facts))))
    return pages


def facts_key(url: str, key: list[str]) -> Any:
    """The output key of a demo product page's record (the demo shop's key is its sku)."""
    from harvester_demo.app import product_facts

    if key != ["sku"]:
        raise ValueError(f"the bench's source is keyed by sku, not {key}")
    return product_facts(int(url.rsplit("/", 1)[1]))["sku"]


def demo_source(name: str, site_url: str, records: int) -> Any:
    """The demo shop's attributes and key, as detail pages, limits wide enough for every task at once."""
    import yaml
    from harvester.config.model import SourceConfig

    document = yaml.safe_load((ROOT / "include" / "sources" / "demo_shop.yaml").read_text())
    document = {key: value for key, value in document.items() if key not in ("listing", "schedule")}
    document.update(name=name, input={"kind": "details", "seeds": [f"{site_url}/product/1"]},
                    rate_limit={"max_active": records, "per_minute": 1_000_000},
                    output={"collection": f"{name}_records", "key": ["sku"]}, harvesting_lag="1h")
    return SourceConfig.model_validate(document)


def held_messages(runner: Any, source: Any, run_id: str, pages: list[tuple[str, str]], package_size: int) -> list[Any]:
    """Plan the run's packages, push its tasks, admit and start them all (not timed): the messages a
    worker holds, with their fencing tokens, as the distributor publishes them."""
    from harvester.distributor import Intake, TaskMessage
    from harvester.storage.packages import PackageTask, planned_task_id

    messages = [TaskMessage(task_id=planned_task_id(source.name, run_id, index // package_size, url),
                            source=source.name, url=url, run_id=run_id, package_id=index // package_size)
                for index, (url, _) in enumerate(pages)]
    packages: dict[int, list[PackageTask]] = {}
    for message in messages:
        packages.setdefault(int(message.package_id), []).append(PackageTask(message.task_id, message.url, "details", 0))
    runner.packages.create_packages(source.name, run_id, sorted(packages.items()))
    Intake(runner.redis, runner.settings).push(source, messages)
    held: list[Any] = []
    while len(held) < len(messages):
        admission = runner.store.admit(source.name, len(messages) - len(held))
        if not admission.messages:
            raise RuntimeError(f"admission stopped at {len(held)} of {len(messages)}: {admission.status}")
        admitted = [TaskMessage.model_validate({**json.loads(raw), "lease_token": token})
                    for raw, token in zip(admission.messages, admission.tokens, strict=True)]
        leases = {message.task_id: str(message.lease_token) for message in admitted}
        runner.store.mark_published(source.name, leases)
        runner.store.start(source.name, leases)
        held += admitted
    return held


def fresh_collection(collection: Any, indexes: list[dict[str, Any]]) -> Any:
    """``collection`` emptied, with ``indexes`` (the output's, as ``list_indexes`` gives them)."""
    collection.drop()
    for index in indexes:
        collection.create_index(list(index["key"].items()), unique=bool(index.get("unique")), name=index["name"])
    return collection


def raw_write(collection: Any, records: list[dict[str, Any]], key: list[str]) -> float:
    """Seconds of one unordered bulk_write of ReplaceOne upserts on the key: the storage's own work, nothing else."""
    from pymongo import ReplaceOne

    started = time.perf_counter()
    collection.bulk_write([ReplaceOne({name: record[name] for name in key}, record, upsert=True)
                           for record in records], ordered=False)
    return time.perf_counter() - started


def settle_ceiling(redis_url: str, mongo_uri: str, database: str, records: int = 3000, batch_size: int = 16,
                   package_size: int = 50, site_url: str = "http://127.0.0.1:8008", rounds: int = 2,
                   profile: str | None = None) -> dict[str, Any]:
    """The figures of the module docstring; each side's best of ``rounds`` (a shared machine)."""
    from harvester.connections import close_clients
    from harvester.scraping import FetchResult
    from harvester.settings import HarvesterSettings
    from harvester.workers.batch import BatchRunner

    settings = HarvesterSettings(redis_url=redis_url, mongo_uri=mongo_uri, mongo_database=database,
                                 admit_batch_size=min(10_000, records), publish_batch_size=batch_size,
                                 allowed_private_networks="127.0.0.1/32")
    pages = product_pages(site_url, records)
    best: dict[str, float] = {}
    cpu_per_record = []
    for round_number in range(rounds):
        runner = BatchRunner(settings)
        source = demo_source(f"bench_settle_{round_number}_{os.getpid()}", site_url, records)
        held = held_messages(runner, source, f"run-{round_number}", pages, package_size)
        fetches = [FetchResult(url=url, outcome="ok", final_url=url, status=200, text=text,
                               content_type="text/html; charset=utf-8", size=len(text)) for url, text in pages]
        output = runner.data.collection(source)  # its indexes exist before timing, as in a running harvest
        indexes = [index for index in output.list_indexes() if index["name"] != "_id_"]
        raw = fresh_collection(output.database[f"{source.output_collection}_raw"], indexes)
        key = source.output.key
        profiler = cProfile.Profile() if profile and round_number == rounds - 1 else None
        settle_seconds = raw_batched = cpu_seconds = 0.0
        for start in range(0, records, batch_size):
            # one batch settled, then the same records written raw: both sides meet the same moment's load
            cpu_started, started = time.process_time(), time.perf_counter()
            if profiler:
                profiler.enable()
            report = runner.finish(source, held[start:start + batch_size], fetches[start:start + batch_size])
            if profiler:
                profiler.disable()
            settle_seconds += time.perf_counter() - started
            cpu_seconds += time.process_time() - cpu_started
            if report.stored != len(held[start:start + batch_size]):
                raise RuntimeError(f"a batch stored {report.stored} of its tasks: {report.as_dict()}")
            keys = [facts_key(page_url, key) for page_url, _ in pages[start:start + batch_size]]
            written = [{name: value for name, value in document.items() if name != "_id"}
                       for document in output.find({key[0]: {"$in": keys}})]
            raw_batched += raw_write(raw, written, key)
        if profiler:
            profiler.dump_stats(profile)
        cpu_per_record.append(1000 * cpu_seconds / records)
        stored = [{name: value for name, value in document.items() if name != "_id"} for document in output.find({})]
        if len(stored) != records or raw.count_documents({}) != records:
            raise RuntimeError(f"{len(stored)} records stored, {raw.count_documents({})} written raw, of {records}")
        finished = runner.packages.collection.count_documents({"source": source.name, "status": 1})
        if finished != -(-records // package_size):
            raise RuntimeError(f"{finished} packages finished of {-(-records // package_size)}")
        raw_once = raw_write(fresh_collection(raw, indexes), stored, key)
        key_only = fresh_collection(raw, [index for index in indexes if index.get("unique")])
        raw_key_only = sum(raw_write(key_only, stored[start:start + batch_size], key)
                           for start in range(0, records, batch_size))
        for name, seconds in (("settle", settle_seconds), ("raw", raw_batched), ("raw_once", raw_once),
                              ("raw_key_only", raw_key_only)):
            best[name] = min(best.get(name, float("inf")), seconds)
        raw.drop()
        output.drop()
        runner.close()
        close_clients()
    settle_rate, raw_rate, once_rate, key_only_rate = (
        records / best[name] for name in ("settle", "raw", "raw_once", "raw_key_only"))
    return {"settle_records": records, "settle_batch_size": batch_size,
            "settle_records_per_s": round(settle_rate, 1), "raw_bulk_records_per_s": round(raw_rate, 1),
            "settle_ceiling_ratio": round(settle_rate / raw_rate, 3),
            "raw_one_write_records_per_s": round(once_rate, 1),
            "settle_one_write_ratio": round(settle_rate / once_rate, 3),
            "raw_key_index_only_records_per_s": round(key_only_rate, 1),
            "settle_cpu_ms_per_record": round(min(cpu_per_record), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", help="write the last round's cProfile stats of the settle path here")
    parser.add_argument("--smoke", action="store_true", help="160 records, one round (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.records, args.rounds = 160, 1
    from harvester.services import readiness
    from harvester.services.mongo import choose_mongo
    from harvester.services.ports import LOOPBACK, free_port

    with tempfile.TemporaryDirectory(prefix="bench-settle-") as directory:
        base = Path(directory)
        redis_port = free_port()
        redis_url = f"redis://{LOOPBACK}:{redis_port}/0"
        started = [subprocess.Popen(["redis-server", "--bind", LOOPBACK, "--port", str(redis_port), "--dir", directory,
                                     "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
                                    stdout=subprocess.DEVNULL, start_new_session=True)]
        (base / "mongod").mkdir()
        mongo = choose_mongo(free_port(), base)
        if mongo.command is not None:
            started.append(subprocess.Popen(mongo.command, stdout=(base / "mongo.log").open("wb"),
                                            stderr=subprocess.STDOUT, start_new_session=True))
        try:
            readiness.wait_until(lambda: readiness.redis_ping(redis_url), 20, "redis-server")
            readiness.wait_until(lambda: readiness.mongo_ping(mongo.uri), 90, mongo.kind)
            result = settle_ceiling(redis_url, mongo.uri, "bench_settle", args.records, args.batch,
                                    rounds=args.rounds, profile=args.profile)
        finally:
            for process in started:
                process.terminate()
                process.wait(30)
    print(json.dumps({**result, "mongo": mongo.kind}))


if __name__ == "__main__":
    main()
