"""A Celery message lost between kombu's BRPOP and its unacked registration (celery/celery#4354): its
queued reservations come back to intake, uncharged, within a few looks of the distributor, not after
``queued_lease_seconds``; a message in its queue or held unacknowledged by a worker is never taken for lost.

The first test pins kombu's Redis transport layout that the distributor reads (the installed kombu): a queue is
a Redis list of JSON envelopes under the queue's name (priority sub-queues ``<queue>\\x06\\x16<n>``), the body
base64 JSON ``[args, kwargs, embed]``; a message a consumer took sits in the hash ``unacked`` (delivery tag ->
``[envelope, exchange, routing_key]``) and the sorted set ``unacked_index`` until it is acknowledged.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import kombu
import pytest
import redis
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings
from kombu.transport import redis as kombu_redis

from tests.distributor.conftest import make_source
from tests.distributor.helpers import published_batches, start_distributor, stop

pytestmark = pytest.mark.integration


def leases_in(batches: list[list[dict]]) -> set[tuple[str, str]]:
    return {(task["task_id"], str(task["lease_token"])) for batch in batches for task in batch}


def test_kombus_redis_layout_is_what_the_distributor_reads(redis_client: redis.Redis, settings: HarvesterSettings,
                                                          redis_server) -> None:
    from harvester.distributor.lost_messages import KOMBU_LAYOUT, messages_in_flight

    assert kombu.__version__ == "5.7.0"  # a new kombu: read its redis.py again and update KOMBU_LAYOUT and this
    channel = kombu_redis.Channel
    assert (channel.unacked_key, channel.unacked_index_key, channel.sep) == ("unacked", "unacked_index", "\x06\x16")
    assert kombu_redis.PRIORITY_STEPS == [0, 3, 6, 9]
    assert KOMBU_LAYOUT.unacked_key == channel.unacked_key and KOMBU_LAYOUT.separator == channel.sep
    assert KOMBU_LAYOUT.priority_steps == tuple(kombu_redis.PRIORITY_STEPS)

    source = make_source("layout", rate_limit={"max_active": 8, "per_minute": 1000})
    Intake(redis_client, settings).push(source, [TaskMessage(source="layout", url=f"http://l.test/{n}")
                                                 for n in range(8)])
    from harvester.distributor.service import Distributor

    Distributor(redis_client, settings.model_copy(update={"publish_batch_size": 4})).run_round()
    queued = leases_in(published_batches(redis_client, "default"))
    assert len(queued) == 8
    assert messages_in_flight(redis_client, ["default"]) == queued

    # a consumer takes one message without acknowledging it, as a Celery worker with acks_late does
    with kombu.Connection(redis_server.url) as connection:
        consumer_queue = kombu.Queue("default", kombu.Exchange("harvester", type="direct"), routing_key="default")
        taken: list[kombu.Message] = []
        with connection.Consumer(consumer_queue, callbacks=[lambda body, message: taken.append(message)],
                                 accept=["json"], prefetch_count=1):
            connection.drain_events(timeout=5)
        assert len(taken) == 1
        [raw] = redis_client.hvals("unacked")
        envelope, _exchange, routing_key = json.loads(raw)
        assert routing_key == "default"
        assert envelope["properties"]["body_encoding"] == "base64"
        assert redis_client.zcard("unacked_index") == 1
        assert redis_client.llen("default") == 1
        assert messages_in_flight(redis_client, ["default"]) == queued  # one in the list, one unacked
        taken[0].ack()
    assert redis_client.hlen("unacked") == 0 and redis_client.zcard("unacked_index") == 0


def test_a_message_lost_in_kombus_window_comes_back_within_a_few_looks(
        redis_client: redis.Redis, settings: HarvesterSettings, distributor_env: dict[str, str],
        tmp_path: Path) -> None:
    log_path = tmp_path / "distributor.log"
    process = start_distributor(distributor_env, log_path, publish_batch_size="4", queued_lease_seconds="3600",
                                lost_message_check_seconds="1", reap_interval_seconds="0.5")
    try:
        source = make_source("lossy", rate_limit={"max_active": 8, "per_minute": 100_000})
        Intake(redis_client, settings).push(source, [TaskMessage(task_id=f"t{n}", source="lossy",
                                                                 url=f"http://lossy.test/{n}") for n in range(8)])
        deadline = time.monotonic() + 30
        while redis_client.llen("default") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert redis_client.llen("default") == 2, log_path.read_text()
        # a worker's main process BRPOPs one message and dies before kombu registers it as unacknowledged
        _, lost = redis_client.brpop(["default"], timeout=5)
        envelope = json.loads(lost)
        lost_ids = {task["task_id"] for batch in published_batches_of([envelope]) for task in batch}
        lost_at = time.monotonic()
        store = RateLimitStore(redis_client, settings)
        while time.monotonic() - lost_at < 20 and store.counters("lossy").get("returned_lost_message", 0) < 4:
            time.sleep(0.1)
        returned_after = time.monotonic() - lost_at
        while time.monotonic() - lost_at < 20 and redis_client.llen("default") < 2:
            time.sleep(0.05)  # admitted again and published
        counters = store.counters("lossy")
        assert counters.get("returned_lost_message", 0) == 4, (counters, log_path.read_text()[-3000:])
        assert returned_after < 10
        # published again under fresh tokens, with the same attempt: they never ran
        republished = [task for batch in published_batches(redis_client, "default") for task in batch]
        again = [task for task in republished if task["task_id"] in lost_ids]
        assert len(again) == 4 and all(task.get("attempt", 0) == 0 for task in again), log_path.read_text()[-2000:]
        # the message still waiting in its queue was never taken for lost
        assert len(republished) == 8 and counters.get("returned_lost_message") == 4
    finally:
        stop(process)
    assert "Traceback" not in log_path.read_text()
    assert redis_client.llen(SourceKeys("lossy").intake) == 0


def published_batches_of(envelopes: list[dict]) -> list[list[dict]]:
    import base64

    return [json.loads(base64.b64decode(envelope["body"]))[0][0] for envelope in envelopes]


def test_one_look_reads_every_sources_reservations_in_one_round_trip(redis_client: redis.Redis,
                                                                      settings: HarvesterSettings) -> None:
    """30 sources, one of them with queued reservations whose message is gone: found in two looks, each
    reading the reservations of all 30 in one MULTI (one each before, every lost_message_check_seconds)."""
    from harvester.distributor.lost_messages import LostMessageProbe
    from harvester.distributor.service import Distributor

    intake = Intake(redis_client, settings)
    for index in range(30):
        intake.register_source(make_source(f"quiet_{index:02d}"))
    intake.push(make_source("lossy", rate_limit={"max_active": 8, "per_minute": 1000}),
                [TaskMessage(source="lossy", url=f"http://lossy.test/{n}") for n in range(4)])
    Distributor(redis_client, settings).run_round()
    redis_client.delete("default")  # the message is in neither its queue nor kombu's unacked set
    probe = LostMessageProbe(redis_client, RateLimitStore(redis_client, settings).scripts,
                             settings.model_copy(update={"lost_message_check_seconds": 0.01}))
    queues = {f"quiet_{index:02d}": "default" for index in range(30)} | {"lossy": "default"}
    time.sleep(0.05)
    redis_client.config_resetstat()
    assert probe.look(queues) == {}  # a suspect at the first look
    assert int(redis_client.info("commandstats")["cmdstat_multi"]["calls"]) == 2  # reservations, then messages
    time.sleep(0.05)
    assert probe.look(queues) == {"lossy": 4}
    assert redis_client.llen(SourceKeys("lossy").intake) == 4
