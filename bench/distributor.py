"""Distributor throughput: intake -> admit (Lua) -> Celery publish, against plain Celery apply_async.

One redis-server (AOF on, as in production) on a free loopback port; no workers, limits set high so
admission never waits. Three timed phases over the same task messages:

1. ours: `Distributor.run_round()` until every task is admitted and published (batches of
   publish_batch_size tasks of one source per Celery message), counting Redis round trips;
2. plain Celery: `signature.apply_async(args=[[task]], queue=...)`, one message per task, no admission;
3. plain Celery batched: the same, `publish_batch_size` tasks per message (to show admission's own cost).

Usage: .venv/bin/python bench/distributor.py [--tasks 40000] [--sources 8] [--smoke]
``--smoke`` (CI: tests/test_benches.py): 1,200 tasks of 2 sources (more than one admission batch each).
The last line is JSON with admitted_per_s, celery_per_s, ratio (ours / plain Celery) and round_trips_per_task.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY / "include"))

import redis  # noqa: E402
from harvester.services import readiness  # noqa: E402
from harvester.services.ports import LOOPBACK, free_port  # noqa: E402

# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "bench", "tasks", "sources", "push_per_s", "admitted", "admitted_per_s", "celery_messages_ours",
    "celery_per_s", "celery_messages_plain", "celery_batched_per_s", "ratio", "ratio_vs_batched", "round_trips",
    "round_trips_per_task", "rounds", "admit_batch_size", "publish_batch_size",
)


class RoundTrips:
    """Counts what goes over the wire: one send_packed_command per request or pipeline (kombu uses redis-py too)."""

    def __init__(self) -> None:
        self.count = 0
        self._original = redis.connection.AbstractConnection.send_packed_command
        counter = self

        def counting(connection, command, check_health=True):
            counter.count += 1
            return counter._original(connection, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counting


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"redis://{LOOPBACK}:{port}/0"
    process = subprocess.Popen(
        ["redis-server", "--bind", LOOPBACK, "--port", str(port), "--dir", str(directory), "--appendonly", "yes",
         "--appendfsync", "everysec", "--save", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )
    readiness.wait_until(lambda: readiness.redis_ping(url), 20, "redis-server")
    return process, url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40_000)
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="1,200 tasks of 2 sources (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.tasks, args.sources = 1200, 2

    directory = Path(tempfile.mkdtemp(prefix="bench-distributor-"))
    redis_process, url = start_redis(directory)
    os.environ["HARVESTER_REDIS_URL"] = url
    try:
        from harvester.config.model import SourceConfig
        from harvester.distributor import Intake, TaskMessage
        from harvester.distributor.service import Distributor, celery_app_for
        from harvester.settings import get_settings

        get_settings.cache_clear()
        settings = get_settings().model_copy(update={"queue_max_depth": 10_000_000, "reap_interval_seconds": 3600})
        client = redis.Redis.from_url(url)
        per_source = args.tasks // args.sources
        sources = [
            SourceConfig(name=f"bench_{i}", input={"seeds": ["http://bench.test/"], "kind": "details"},
                         attributes={"title": {"css": "h1"}}, priority="high" if i % 2 else "normal",
                         rate_limit={"max_active": 10_000, "per_minute": 1_000_000})
            for i in range(args.sources)
        ]
        messages = {
            source.name: [TaskMessage(source=source.name, url=f"http://bench.test/{source.name}/{n}",
                                      run_id="bench", package_id=n // 100) for n in range(per_source)]
            for source in sources
        }
        total = per_source * len(sources)
        intake = Intake(client, settings)
        started = time.perf_counter()
        for source in sources:
            intake.push(source, messages[source.name])
        push_seconds = time.perf_counter() - started

        app = celery_app_for(settings)
        distributor = Distributor(client, settings, app=app)
        distributor.run_round()  # warm up: scripts loaded, connections open; counted in the totals below
        trips = RoundTrips()
        started = time.perf_counter()
        while distributor.totals.admitted < total:
            distributor.run_round()
        ours_seconds = time.perf_counter() - started
        ours_trips = trips.count
        admitted = distributor.totals.admitted
        published_messages = sum(client.llen(queue) for queue in ("priority", "default"))
        client.delete("priority", "default")

        signature = app.signature("harvester.scrape_batch")
        plain = [(source.queue, [m.model_dump(mode="json") for m in messages[source.name]]) for source in sources]
        signature.apply_async(args=[[plain[0][1][0]]], queue=plain[0][0])  # warm up
        started = time.perf_counter()
        for queue, dicts in plain:
            for task in dicts:
                signature.apply_async(args=[[task]], queue=queue)
        celery_seconds = time.perf_counter() - started
        celery_messages = sum(client.llen(queue) for queue in ("priority", "default"))
        client.delete("priority", "default")

        size = settings.publish_batch_size
        started = time.perf_counter()
        for queue, dicts in plain:
            for start in range(0, len(dicts), size):
                signature.apply_async(args=[dicts[start:start + size]], queue=queue)
        batched_seconds = time.perf_counter() - started

        result = {
            "bench": "distributor",
            "tasks": total,
            "sources": len(sources),
            "push_per_s": round(total / push_seconds),
            "admitted": admitted,
            "admitted_per_s": round(admitted / ours_seconds),
            "celery_messages_ours": published_messages,
            "celery_per_s": round(total / celery_seconds),
            "celery_messages_plain": celery_messages - 1,
            "celery_batched_per_s": round(total / batched_seconds),
            "ratio": round((admitted / ours_seconds) / (total / celery_seconds), 2),
            "ratio_vs_batched": round((admitted / ours_seconds) / (total / batched_seconds), 2),
            "round_trips": ours_trips,
            "round_trips_per_task": round(ours_trips / admitted, 4),
            "rounds": distributor.totals.rounds,
            "admit_batch_size": settings.admit_batch_size,
            "publish_batch_size": size,
        }
        print(f"ours:  {admitted} tasks admitted and published in {ours_seconds:.2f}s "
              f"({result['admitted_per_s']}/s, {ours_trips} Redis round trips)")
        print(f"plain Celery apply_async, one message per task: {total / celery_seconds:.0f}/s")
        print(f"plain Celery apply_async, {size} tasks per message: {total / batched_seconds:.0f}/s")
        print(json.dumps(result))
        return 0
    finally:
        redis_process.terminate()
        redis_process.wait(20)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
