"""Reading what the distributor published: Celery messages in kombu's Redis lists."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis
from harvester.distributor import Admission, Intake, RateLimitStore, TaskMessage
from harvester.settings import REPOSITORY_ROOT


def held_messages(admission: Admission) -> list[TaskMessage]:
    """The admitted messages with their fencing tokens, as a worker receives them."""
    return admission.task_messages()


MALFORMED_TASK_ID = "bad1"


def push_with_one_malformed(intake: Intake, source: str, good: list[TaskMessage]) -> None:
    """``good``'s first two tasks with one between them that admit.lua passes but is no valid task (depth -1)."""
    bad = json.dumps({"task_id": MALFORMED_TASK_ID, "source": source, "url": f"http://{source}.test/x", "depth": -1})
    intake.push_raw(source, [good[0].to_json(), bad, good[1].to_json()])


def leases_of(*messages: TaskMessage) -> dict[str, str]:
    return {message.task_id: str(message.lease_token) for message in messages}


def admit_and_start(store: RateLimitStore, source: str, wanted: int, now: float | None = None
                    ) -> list[TaskMessage]:
    """What the distributor and a worker do: admit, confirm published, start; the held messages."""
    messages = held_messages(store.admit(source, wanted, now=now))
    store.mark_published(source, leases_of(*messages), now=now)
    started = store.start(source, leases_of(*messages), now=now)
    assert started.stale == 0, started
    return messages


def published_batches(client: redis.Redis, queue: str) -> list[list[dict[str, Any]]]:
    """The task batches (args[0] of harvester.scrape_batch) waiting in a Celery queue, oldest first."""
    batches = []
    for raw in reversed(client.lrange(queue, 0, -1)):  # kombu LPUSHes, workers BRPOP
        envelope = json.loads(raw)
        assert envelope["headers"]["task"] == "harvester.scrape_batch"
        args, _kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        batches.append(args[0])
    return batches


def published_tasks(client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [task for batch in published_batches(client, queue) for task in batch]


def start_distributor(env: dict[str, str], log_path: Path, **settings: str) -> subprocess.Popen[bytes]:
    """`harvester distributor` as its own process (own session, so a test can signal just it)."""
    environment = {**env, **{f"HARVESTER_{key.upper()}": value for key, value in settings.items()}}
    log = log_path.open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "harvester.cli", "distributor", "--log-level", "INFO"],
            env=environment, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=REPOSITORY_ROOT, start_new_session=True,
        )
    finally:
        log.close()


def stop(process: subprocess.Popen[bytes], timeout: float = 15) -> int:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout)
    return int(process.returncode)


def hold_started_leases(client: redis.Redis, source: str, task_ids: list[str], token: str = "1",
                        seconds: float = 600.0) -> dict[str, str]:
    """Leases of ``task_ids`` started under ``token`` (as start.lua leaves them), for ``seconds`` by the server's
    clock: what a permit's tasks must hold for acquire_fetch.lua to grant their requests tokens. Returns the
    leases (task id -> token) for a LeaseHeartbeat."""
    from harvester.redis_keys import SourceKeys

    keys = SourceKeys(source)
    seconds_now, microseconds = client.time()
    deadline = seconds_now + microseconds / 1e6 + seconds
    client.hset(keys.leases, mapping={task_id: f"s|{token}" for task_id in task_ids})
    client.zadd(keys.active, dict.fromkeys(task_ids, deadline))
    return dict.fromkeys(task_ids, token)
