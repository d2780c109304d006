"""The fixtures start real servers: Redis with AOF, a MongoDB, and Celery workers that consume."""

from __future__ import annotations

import pymongo
import pytest
from harvester.workers.celery_app import app, declared_queues

pytestmark = pytest.mark.integration


def test_redis_is_real_and_survives_a_restart_with_aof(redis_server, redis_client) -> None:
    redis_client.set("harvester:test:key", "kept")
    redis_client.execute_command("BGREWRITEAOF")
    redis_server.server.restart()
    client = redis_server.client()
    assert client.get("harvester:test:key") == b"kept"
    assert client.config_get("appendonly")["appendonly"] == "yes"


def test_mongo_bulk_upserts_and_unique_index(mongo_server, mongo_database) -> None:
    client = mongo_server.client()
    collection = client[mongo_database]["items"]
    collection.create_index("url", unique=True)
    operations = [
        pymongo.UpdateOne({"url": f"u{i}"}, {"$set": {"n": i}}, upsert=True) for i in range(50)
    ]
    result = collection.bulk_write(operations, ordered=False)
    assert result.upserted_count == 50
    again = collection.bulk_write(operations, ordered=False)
    assert again.upserted_count == 0
    assert collection.count_documents({}) == 50
    with pytest.raises(pymongo.errors.DuplicateKeyError):
        collection.insert_one({"url": "u1"})


def test_mongo_uri_switch_uses_the_given_server(mongo_server, monkeypatch, tmp_path) -> None:
    """HARVESTER_MONGO_URI wins over every local choice."""
    from harvester.services.mongo import choose_mongo

    monkeypatch.setenv("HARVESTER_MONGO_URI", mongo_server.uri)
    choice = choose_mongo(1, tmp_path)
    assert choice.kind == "external" and choice.uri == mongo_server.uri
    assert pymongo.MongoClient(choice.uri).admin.command("ping")["ok"] == 1


def test_celery_worker_consumes_its_declared_queue(celery_worker_factory, harvester_settings) -> None:
    assert {queue.name for queue in declared_queues()} == {"priority", "default", "pageslots"}
    celery_worker_factory(queues="priority")
    from harvester.settings import get_settings

    app.conf.broker_url = get_settings().redis_url
    replies = app.control.ping(timeout=5.0)
    assert replies, "no worker answered the ping"
