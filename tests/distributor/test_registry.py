"""The one registered copy of a source: the producer writes it, everyone downstream reads it by version."""

from __future__ import annotations

import pytest
import redis
from harvester.distributor import RegisteredSources, SourceRegistry
from harvester.distributor.registry import registration_fields
from harvester.errors import SourceNotRegistered
from harvester.redis_keys import SourceKeys

from tests.distributor.conftest import make_source

pytestmark = pytest.mark.integration


def commands_sent(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])


def test_the_registered_copy_is_the_validated_config_and_is_read_once_per_version(redis_client: redis.Redis):
    source = make_source("shop", rate_limit={"max_active": 7, "per_minute": 90, "per_host_max_active": 3},
                         harvesting_lag="6h")
    SourceRegistry(redis_client).register(source)
    sources = RegisteredSources(redis_client)
    first = sources.get("shop")
    assert first == source  # the whole validated config, not a subset
    before = commands_sent(redis_client)
    assert sources.get("shop") is first  # same version: the cached object, not a re-parse
    assert commands_sent(redis_client) - before == 2  # one HGET of the version (and INFO itself)
    SourceRegistry(redis_client).register(source)  # registering the same config again changes nothing
    assert sources.get("shop") is first
    edited = source.model_copy(update={"retries": 9})
    SourceRegistry(redis_client).register(edited)
    assert sources.get("shop").retries == 9 and sources.version("shop") == registration_fields(edited)["version"]


def test_the_distributor_reads_the_same_registration(redis_client: redis.Redis):
    source = make_source("sg_shop", render="browser", country="SG", priority="high",
                         rate_limit={"max_active": 5, "per_minute": 60, "per_host_max_active": 2})
    SourceRegistry(redis_client).register(source)
    registered = SourceRegistry(redis_client).read_all()["sg_shop"]
    assert (registered.max_active, registered.per_minute, registered.per_host_max_active) == (5, 60, 2)
    assert registered.browser and registered.country == "SG" and registered.high_priority
    assert registered.queue == "pageslots" and registered.version == registration_fields(source)["version"]
    fields = redis_client.hmget(SourceKeys("sg_shop").config, ["max_active", "per_host_max_active"])
    assert fields == [b"5", b"2"]  # what the Lua scripts read, written in the same HSET


def test_a_source_nobody_registered_is_refused_with_the_reason(redis_client: redis.Redis):
    sources = RegisteredSources(redis_client)
    with pytest.raises(SourceNotRegistered, match="'absent' is not registered"):
        sources.get("absent")
    SourceRegistry(redis_client).register(make_source("old"))
    redis_client.hdel(SourceKeys("old").config, "version", "document")  # registered before documents existed
    with pytest.raises(SourceNotRegistered):
        sources.get("old")
    SourceRegistry(redis_client).register(make_source("odd"))
    redis_client.hset(SourceKeys("odd").config, mapping={"document": '{"name": "odd"}', "version": "x"})
    with pytest.raises(SourceNotRegistered, match="does not validate"):
        sources.get("odd")
