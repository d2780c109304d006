"""The error hierarchy, and backend errors wrapped at the storage boundary (limits' StorageError model)."""

from __future__ import annotations

import subprocess
import sys

import pymongo
import pymongo.errors
import pytest
import redis
from harvester import errors
from harvester.config.model import SourceConfig
from harvester.distributor import DeadLetters, Intake, RateLimitStore
from harvester.errors import (
    HarvesterError,
    StorageError,
    StorageUnavailableError,
    mongo_storage_errors,
    redis_storage_errors,
)
from harvester.redis_keys import SourceKeys
from harvester.services.ports import free_port
from harvester.settings import HarvesterSettings
from harvester.storage.data_handler import DataHandler
from harvester.storage.packages import PackageStore
from harvester.storage.runs import RunStore
from harvester.storage.url_store import URLStore
from redis.backoff import NoBackoff
from redis.retry import Retry

SOURCE = SourceConfig.model_validate({"name": "shop", "attributes": {"t": "h1"},
                                      "input": {"kind": "details", "seeds": ["http://a.example/1"]}})


@pytest.mark.unit
def test_every_declared_error_is_a_harvester_error_and_keeps_its_builtin_base():
    declared = [getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), type)]
    assert all(issubclass(error, HarvesterError) for error in declared)
    assert issubclass(errors.SourceConfigError, ValueError) and issubclass(errors.CoercionError, ValueError)
    assert issubclass(errors.ServiceNotReady, RuntimeError) and issubclass(errors.MongoUnavailableError, RuntimeError)
    assert issubclass(errors.MongoUnavailableError, StorageUnavailableError)
    assert issubclass(errors.ConnectionNotFound, LookupError) and issubclass(errors.ClusterError, RuntimeError)


@pytest.mark.unit
def test_old_import_places_still_name_the_same_classes():
    from harvester.airflow.dags import InvalidSourceFiles
    from harvester.config import SourceConfigError
    from harvester.connections import ConnectionNotFound, MongoUnavailableError
    from harvester.distributor.service import ShutdownRequested
    from harvester.scraping.extraction.extractor import CoercionError
    from harvester.services.cluster import ClusterError
    from harvester.services.readiness import ServiceNotReady

    assert (SourceConfigError, InvalidSourceFiles, ShutdownRequested, MongoUnavailableError, CoercionError,
            ServiceNotReady, ConnectionNotFound, ClusterError) == (
        errors.SourceConfigError, errors.InvalidSourceFiles, errors.ShutdownRequested, errors.MongoUnavailableError,
        errors.CoercionError, errors.ServiceNotReady, errors.ConnectionNotFound, errors.ClusterError)
    from harvester.observability.views import UnknownSource
    from harvester.pageslots.registry import SlotTransitionRefused
    from harvester.scraping.fetching.addresses import AddressRefused
    from harvester.scraping.fetching.bodies import BodyRefused
    from harvester.scraping.fetching.page_fetcher import HostRateTimeout

    assert (UnknownSource, SlotTransitionRefused, AddressRefused, BodyRefused, HostRateTimeout) == (
        errors.UnknownSource, errors.SlotTransitionRefused, errors.AddressRefused, errors.BodyRefused,
        errors.HostRateTimeout)


@pytest.mark.unit
def test_the_errors_module_loads_no_backend_client():
    """The DAG file's parse imports config errors: it must not pay for redis-py or pymongo."""
    probe = "import sys, harvester.errors; print(sorted({'redis', 'pymongo'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


@pytest.mark.unit
@pytest.mark.parametrize(("raised", "unavailable"), [
    (redis.ConnectionError("refused"), True),
    (redis.TimeoutError("slow"), True),
    (redis.ResponseError("WRONGTYPE"), False),
])
def test_a_redis_error_leaves_as_a_storage_error_that_is_still_a_redis_error(raised, unavailable):
    with pytest.raises(StorageError) as caught, redis_storage_errors():
        raise raised
    assert caught.value.__cause__ is raised and caught.value.backend_error is raised
    assert isinstance(caught.value, StorageUnavailableError) is unavailable
    assert isinstance(caught.value, redis.RedisError)  # callers that catch redis-py's classes still do
    assert isinstance(caught.value, redis.ConnectionError) is unavailable
    assert str(caught.value) == str(raised)


@pytest.mark.unit
@pytest.mark.parametrize(("raised", "unavailable"), [
    (pymongo.errors.ServerSelectionTimeoutError("no server"), True),
    (pymongo.errors.AutoReconnect("reset"), True),
    (pymongo.errors.OperationFailure("bad query", code=2), False),
])
def test_a_pymongo_error_leaves_as_a_storage_error_that_is_still_a_pymongo_error(raised, unavailable):
    with pytest.raises(StorageError) as caught, mongo_storage_errors():
        raise raised
    assert caught.value.__cause__ is raised
    assert isinstance(caught.value, StorageUnavailableError) is unavailable
    assert isinstance(caught.value, pymongo.errors.PyMongoError)
    assert isinstance(caught.value, pymongo.errors.ConnectionFailure) is unavailable
    assert not caught.value.has_error_label("anything")  # pymongo's own API works on the wrapper


@pytest.mark.unit
def test_other_errors_and_storage_errors_pass_unwrapped():
    with pytest.raises(KeyError), redis_storage_errors(), mongo_storage_errors():
        raise KeyError("not a backend error")
    with pytest.raises(StorageError) as caught, mongo_storage_errors(), redis_storage_errors():
        raise redis.ConnectionError("once")
    assert type(caught.value.__cause__) is redis.ConnectionError  # wrapped once, not twice


@pytest.mark.unit
def test_the_distributor_stores_raise_storage_unavailable_when_redis_is_down():
    client = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    calls = [
        lambda: RateLimitStore(client, HarvesterSettings()).admit("shop", 1),
        lambda: RateLimitStore(client, HarvesterSettings()).heartbeat("shop", {"t1": "1"}),
        lambda: RateLimitStore(client, HarvesterSettings()).start("shop", {"t1": "1"}),
        lambda: RateLimitStore(client, HarvesterSettings()).stats_all(),
        lambda: Intake(client, HarvesterSettings()).push_raw("shop", ["{}"]),
        lambda: DeadLetters(client).requeue("shop"),
        lambda: URLStore(client).mark_seen(SOURCE, ["http://a.example/1"]),
    ]
    for call in calls:
        with pytest.raises(StorageUnavailableError) as caught:
            call()
        assert isinstance(caught.value.__cause__, redis.ConnectionError)


@pytest.mark.unit
def test_the_data_handler_raises_storage_unavailable_when_mongodb_is_down():
    client = pymongo.MongoClient(port=free_port(), serverSelectionTimeoutMS=200, connect=False)
    try:
        with pytest.raises(StorageUnavailableError) as caught:
            DataHandler(HarvesterSettings(), client).write(SOURCE, [{"url": "http://a.example/1", "t": "x"}])
    finally:
        client.close()
    assert isinstance(caught.value.__cause__, pymongo.errors.ServerSelectionTimeoutError)


@pytest.mark.unit
def test_the_package_and_run_stores_raise_storage_unavailable_when_mongodb_is_down():
    client = pymongo.MongoClient(port=free_port(), serverSelectionTimeoutMS=200, connect=False)
    try:
        for call in (lambda: PackageStore(client["harvester"]).claim("shop", "run-1", 1),
                     lambda: RunStore(client["harvester"]).get("shop", "run-1")):
            with pytest.raises(StorageUnavailableError) as caught:
                call()
            assert isinstance(caught.value, pymongo.errors.ConnectionFailure)  # what callers caught before
    finally:
        client.close()


@pytest.mark.integration
def test_a_command_redis_refuses_is_a_storage_error_but_not_an_outage(redis_client):
    redis_client.set(SourceKeys("shop").leases, "not a hash")
    with pytest.raises(StorageError) as caught:
        RateLimitStore(redis_client, HarvesterSettings()).heartbeat("shop", {"t1": "1"})
    assert not isinstance(caught.value, StorageUnavailableError)
    assert isinstance(caught.value.__cause__, redis.ResponseError)
