"""The connection factory: ids from Airflow, from ``AIRFLOW_CONN_<ID>``, the HARVESTER_* defaults, TLS and
unix-socket URLs kept, one client per process, and the options every client gets."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from harvester import connections
from harvester.connections import (
    ConnectionFields,
    ConnectionNotFound,
    EnvironmentResolver,
    MongoTarget,
    RedisTarget,
    aresolve_mongo,
    aresolve_redis,
    blocking_twin,
    mongo_client,
    redis_client,
    resolve_mongo,
    resolve_redis,
)
from harvester.services import readiness
from harvester.services.mongo import airflow_connection_uri
from harvester.settings import REPOSITORY_ROOT, HarvesterSettings

from tests.fixtures.servers import ServerProcess

SETTINGS = HarvesterSettings(mongo_uri="mongodb://127.0.0.1:1/?directConnection=true",
                             redis_url="redis://127.0.0.1:1/0", producer_mongo_timeout_ms=1234)


@pytest.fixture(autouse=True)
def _no_connection_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("AIRFLOW_CONN_"):
            monkeypatch.delenv(name)
    # importing harvester.airflow (another test may have) registers the Airflow resolver for the
    # whole process; these tests are about the factory's own resolution, so they run without it
    registered = connections.registered_resolvers()
    for resolver in registered:
        connections.unregister_resolver(resolver)
    yield
    connections.close_clients()
    for resolver in reversed(registered):
        connections.register_resolver(resolver)


# -- resolution -----------------------------------------------------------------------------------
@pytest.mark.unit
def test_defaults_are_harvester_mongo_uri_and_harvester_redis_url() -> None:
    mongo = resolve_mongo("mongo_default", SETTINGS)
    assert (mongo.uri, mongo.via, dict(mongo.options)) == (SETTINGS.mongo_uri, "HARVESTER_MONGO_URI", {})
    target = resolve_redis("redis_default", SETTINGS)
    assert (target.url, target.via) == (SETTINGS.redis_url, "HARVESTER_REDIS_URL")


@pytest.mark.unit
def test_without_any_default_the_error_names_the_id_and_the_variable() -> None:
    with pytest.raises(ConnectionNotFound, match="'mongo_archive' and HARVESTER_MONGO_URI is not set"):
        resolve_mongo("mongo_archive", HarvesterSettings(mongo_uri=None))


@pytest.mark.unit
def test_in_an_event_loop_a_resolvers_async_method_is_awaited_else_its_plain_one() -> None:
    """The triggerer's path: ``amongo``/``aredis`` where a resolver has them, ``mongo``/``redis`` where it
    has not, the first that knows the id wins, and an id nobody knows falls back to the HARVESTER_* default."""

    class Plain:
        def mongo(self, connection_id: str) -> MongoTarget | None:
            return MongoTarget(connection_id, "mongodb://plain.test/", "plain") if connection_id == "plain" else None

        def redis(self, connection_id: str) -> RedisTarget | None:
            return RedisTarget(connection_id, "redis://plain.test/0", "plain") if connection_id == "plain" else None

    class Awaited(Plain):
        async def amongo(self, connection_id: str) -> MongoTarget | None:
            return MongoTarget(connection_id, "mongodb://awaited.test/", "awaited") if connection_id != "x" else None

        async def aredis(self, connection_id: str) -> RedisTarget | None:
            return RedisTarget(connection_id, "redis://awaited.test/0", "awaited") if connection_id != "x" else None

    plain, awaited = Plain(), Awaited()
    connections.register_resolver(awaited)
    connections.register_resolver(plain)  # consulted first (the last registered is)
    try:
        assert asyncio.run(aresolve_mongo("plain", SETTINGS)).via == "plain"  # the first resolver knows it
        assert asyncio.run(aresolve_redis("plain", SETTINGS)).via == "plain"
        assert asyncio.run(aresolve_mongo("other", SETTINGS)).uri == "mongodb://awaited.test/"
        assert asyncio.run(aresolve_redis("other", SETTINGS)).url == "redis://awaited.test/0"
        assert asyncio.run(aresolve_mongo("x", SETTINGS)).via == "HARVESTER_MONGO_URI"
        assert asyncio.run(aresolve_redis("x", SETTINGS)).via == "HARVESTER_REDIS_URL"
    finally:
        connections.unregister_resolver(awaited)
        connections.unregister_resolver(plain)


@pytest.mark.unit
def test_ids_from_the_environment_in_uri_form_win_over_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # the form `make run` writes: airflow_connection_uri of the stack's MongoDB
    monkeypatch.setenv("AIRFLOW_CONN_MONGO_ARCHIVE",
                       airflow_connection_uri("mongodb://reader:s%40cret@10.1.2.3:27018/?directConnection=true"))
    monkeypatch.setenv("AIRFLOW_CONN_REDIS_DEFAULT", "redis://:pw@cache.internal:6390/2")
    mongo = resolve_mongo("mongo_archive", SETTINGS)
    assert mongo.uri == "mongodb://reader:s%40cret@10.1.2.3:27018"
    assert dict(mongo.options) == {"directConnection": "true"}
    assert mongo.via == "environment variable AIRFLOW_CONN_MONGO_ARCHIVE"
    assert "s%40cret" not in mongo.redacted and "10.1.2.3:27018" in mongo.redacted
    assert resolve_redis("redis_default", SETTINGS).url == "redis://:pw@cache.internal:6390/2"


@pytest.mark.unit
def test_ids_from_the_environment_in_json_form() -> None:
    environ = {"AIRFLOW_CONN_MONGO_SECOND": json.dumps({
        "conn_type": "mongo", "host": "db2", "port": 27017, "login": "u", "password": "p w", "schema": "admin",
        "extra": {"srv": False, "replicaSet": "rs0", "ssl": True, "allow_insecure": True}})}
    target = EnvironmentResolver(environ).mongo("mongo_second")
    assert target is not None and target.uri == "mongodb://u:p+w@db2:27017/admin"
    assert dict(target.options) == {"replicaSet": "rs0", "tlsAllowInvalidCertificates": True}
    assert EnvironmentResolver(environ).mongo("mongo_third") is None


@pytest.mark.unit
def test_redis_connection_fields_read_like_redis_hook_plus_tls_and_unix() -> None:
    def url(value: str) -> str:
        target = EnvironmentResolver({"AIRFLOW_CONN_R": value}).redis("r")
        assert target is not None
        return target.url

    assert url("redis://redis:6379/0") == "redis://redis:6379/0"
    assert url('{"conn_type": "redis", "host": "h", "port": 1, "extra": {"db": 4}}') == "redis://h:1/4"
    assert url('{"conn_type": "redis", "host": "h", "password": "pw", "extra": {"ssl": true}}') == "rediss://:pw@h:6379/0"
    assert url("rediss://user:pw@h:6380/1") == "rediss://user:pw@h:6380/1"
    assert url("unix:///run/redis/redis.sock?db=2") == "unix:///run/redis/redis.sock?db=2"
    with pytest.raises(ValueError, match="cluster"):
        url('{"conn_type": "redis", "host": "h", "extra": {"cluster": true}}')


@pytest.mark.unit
def test_uri_parsing_matches_airflow_for_the_forms_we_document() -> None:
    fields = ConnectionFields.from_uri("mongo://user:p%40ss@host:27017/db?authSource=admin&tls=true")
    assert fields == ConnectionFields("mongo", "host", 27017, "user", "p@ss", "db",
                                      {"authSource": "admin", "tls": "true"})
    extra = ConnectionFields.from_uri("redis://h:1/?__extra__=%7B%22db%22%3A+3%7D")
    assert extra.extra == {"db": 3}


@pytest.mark.unit
@pytest.mark.airflow
def test_ids_resolve_through_airflow_like_the_environment_does(tmp_path: Path) -> None:
    """A real Airflow (scratch AIRFLOW_HOME, subprocess): MongoHook and BaseHook.get_connection /
    aget_connection give the same targets as the Airflow-free reading of the same variables."""
    script = textwrap.dedent("""
        import asyncio, json
        import harvester.airflow  # registers the Airflow resolver
        from harvester.airflow.connections import AirflowConnectionResolver
        from harvester.connections import EnvironmentResolver, registered_resolvers, resolve_mongo, resolve_redis
        from harvester.settings import get_settings
        settings = get_settings()
        airflow, environment = AirflowConnectionResolver(), EnvironmentResolver()
        strip = lambda target: None if target is None else [target.uri if hasattr(target, "uri") else target.url,
                                                            dict(target.options)]
        answer = {
            "registered": [type(resolver).__name__ for resolver in registered_resolvers()],
            "mongo": [strip(airflow.mongo("mongo_second")), strip(environment.mongo("mongo_second"))],
            "amongo": strip(asyncio.run(airflow.amongo("mongo_second"))),
            "redis": [strip(airflow.redis("redis_tls")), strip(environment.redis("redis_tls"))],
            "aredis": strip(asyncio.run(airflow.aredis("redis_tls"))),
            "missing": strip(airflow.mongo("mongo_missing")),
            "via": [resolve_mongo("mongo_second", settings).via, resolve_redis("redis_tls", settings).via,
                    resolve_mongo("mongo_default", settings).via],
        }
        print(json.dumps(answer))
    """)
    environment = {
        **os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": str(REPOSITORY_ROOT / "include"), "HARVESTER_MONGO_URI": "mongodb://127.0.0.1:1/",
        "AIRFLOW_CONN_MONGO_SECOND": json.dumps({
            "conn_type": "mongo", "host": "db2", "port": 27017, "login": "user", "password": "secret",
            "extra": {"directConnection": True, "ssl": True, "allow_insecure": True}}),
        "AIRFLOW_CONN_REDIS_TLS": json.dumps({"conn_type": "redis", "host": "cache", "port": 6380,
                                              "password": "pw", "extra": {"ssl": True, "db": 2,
                                                                          "ssl_cert_reqs": "none"}}),
    }
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                            timeout=180, cwd=REPOSITORY_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["registered"] == ["AirflowConnectionResolver"]
    mongo = ["mongodb://user:secret@db2:27017", {"directConnection": True, "tlsAllowInvalidCertificates": True}]
    assert answer["mongo"] == [mongo, mongo] and answer["amongo"] == mongo
    redis_target = ["rediss://:pw@cache:6380/2", {"ssl_cert_reqs": "none"}]
    assert answer["redis"] == [redis_target, redis_target] and answer["aredis"] == redis_target
    assert answer["missing"] is None
    assert answer["via"] == ["Airflow connection mongo_second", "Airflow connection redis_tls", "HARVESTER_MONGO_URI"]


# -- clients --------------------------------------------------------------------------------------
@pytest.mark.unit
def test_tls_urls_keep_their_ssl_connection_class(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = HarvesterSettings(redis_url="rediss://127.0.0.1:1/0")
    assert redis_client("redis_default", settings=settings).connection_pool.connection_class is redis.SSLConnection
    blocking = redis_client("redis_default", settings=settings, blocking_seconds=30)
    assert blocking.connection_pool.connection_class is redis.SSLConnection
    assert blocking.connection_pool.connection_kwargs["socket_timeout"] == 30 + connections.BLOCKING_MARGIN_SECONDS
    monkeypatch.setenv("AIRFLOW_CONN_REDIS_SECURE", '{"conn_type": "redis", "host": "h", "extra": {"ssl": true}}')
    assert redis_client("redis_secure", settings=SETTINGS).connection_pool.connection_class is redis.SSLConnection


@pytest.mark.unit
def test_the_distributors_blocking_client_keeps_tls() -> None:
    """A defect once shipped: the blocking client was rebuilt from connection_kwargs alone, so a
    ``rediss://`` distributor waited for work over plain TCP."""
    from harvester.distributor.service import Distributor

    client = redis.Redis.from_url("rediss://127.0.0.1:1/0")
    distributor = Distributor(client, settings=HarvesterSettings(redis_url="rediss://127.0.0.1:1/0"))
    assert distributor.blocking.connection_pool.connection_class is redis.SSLConnection
    assert distributor.blocking.connection_pool is not client.connection_pool
    assert blocking_twin(client, 5).connection_pool.connection_kwargs["socket_timeout"] == 15


@pytest.mark.unit
def test_one_client_per_process_and_a_new_one_after_fork() -> None:
    first = mongo_client("mongo_default", settings=SETTINGS)
    assert mongo_client("mongo_default", settings=SETTINGS) is first
    assert redis_client("redis_default", settings=SETTINGS) is redis_client("redis_default", settings=SETTINGS)
    assert redis_client("redis_default", settings=SETTINGS, blocking_seconds=5) is not redis_client(
        "redis_default", settings=SETTINGS)
    other = mongo_client("mongo_default", settings=HarvesterSettings(mongo_uri="mongodb://127.0.0.1:2/"))
    assert other is not first  # a changed target is a new client, not the old server's
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a forked pool must not be reused
        os.close(read)
        same = mongo_client("mongo_default", settings=SETTINGS) is first
        os.write(write, b"same" if same else b"new")
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 10) == b"new"
    os.close(read)


@pytest.mark.unit
def test_every_client_gets_the_options_of_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    client = mongo_client("mongo_default", settings=SETTINGS)
    options = client.options
    assert client.codec_options.tz_aware is True
    assert options.server_selection_timeout == 1.234
    assert options.pool_options.connect_timeout == connections.MONGO_CONNECT_TIMEOUT_MS / 1000
    assert options.pool_options.socket_timeout == connections.MONGO_SOCKET_TIMEOUT_MS / 1000
    kwargs = redis_client("redis_default", settings=SETTINGS).connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == connections.REDIS_SOCKET_TIMEOUT_SECONDS
    assert kwargs["socket_connect_timeout"] == connections.REDIS_CONNECT_TIMEOUT_SECONDS
    assert kwargs["health_check_interval"] == connections.REDIS_HEALTH_CHECK_SECONDS
    # a connection's extras override the defaults, as MongoHook passes them to MongoClient
    monkeypatch.setenv("AIRFLOW_CONN_MONGO_SLOW", "mongo://127.0.0.1:1/?serverSelectionTimeoutMS=9000")
    assert mongo_client("mongo_slow", settings=SETTINGS).options.server_selection_timeout == 9.0


@pytest.mark.integration
def test_unix_socket_urls_work_for_commands_and_blocking_reads(tmp_path: Path) -> None:
    socket_path = tmp_path / "redis.sock"
    url = f"unix://{socket_path}?db=0"
    server = ServerProcess("redis-server (unix socket)",
                           ["redis-server", "--port", "0", "--unixsocket", str(socket_path), "--dir", str(tmp_path),
                            "--save", "", "--appendonly", "no"],
                           tmp_path / "redis.log", ready=lambda: readiness.redis_ping(url))
    server.start(timeout=20)
    try:
        from harvester.distributor.service import Distributor

        settings = HarvesterSettings(redis_url=url)
        client = redis_client("redis_default", settings=settings)
        assert client.connection_pool.connection_class is redis.UnixDomainSocketConnection
        assert client.ping() is True
        distributor = Distributor(client, settings=settings)
        assert distributor.blocking.connection_pool.connection_class is redis.UnixDomainSocketConnection
        client.rpush("harvester:wake-test", "token")
        assert distributor.blocking.blpop(["harvester:wake-test"], timeout=1) == (b"harvester:wake-test", b"token")
        assert distributor.wait_for_work(0.1) is False  # a real blocking wait over the socket, woken by its timeout
    finally:
        connections.close_clients()
        server.stop()


# -- Redis Sentinel ----------------------------------------------------------------------------------
@pytest.mark.unit
def test_a_redis_connection_may_name_sentinels_in_its_extras() -> None:
    """As compose and the cluster mode set AIRFLOW_CONN_REDIS_DEFAULT: the URI's host is then ignored."""
    resolver = EnvironmentResolver({
        "AIRFLOW_CONN_R": "redis://:pw@ignored:6379/2?sentinels=s1%3A26379%2Cs2%3A26380&sentinel_master=shop",
        "AIRFLOW_CONN_J": json.dumps({"conn_type": "redis", "password": "pw", "extra": {
            "sentinels": ["s1:26379", "s3:1"], "sentinel_password": "spw"}})})
    uri, from_json = resolver.redis("r"), resolver.redis("j")
    assert uri is not None and from_json is not None
    assert (uri.sentinels, uri.sentinel_master, uri.url) == ((("s1", 26379), ("s2", 26380)), "shop",
                                                              "redis://:pw@ignored:6379/2")
    assert (from_json.sentinels, from_json.sentinel_master, from_json.sentinel_password) == (
        (("s1", 26379), ("s3", 1)), "harvester", "spw")
    assert "spw" not in repr(from_json) and "pw@" not in from_json.redacted
    assert uri.cache_key() != resolver.redis("r").__class__(**{**vars(uri), "sentinels": ()}).cache_key()
    with pytest.raises(ValueError, match="host:port"):
        EnvironmentResolver({"AIRFLOW_CONN_R": json.dumps({"conn_type": "redis", "extra": {"sentinels": "s1"}})}
                            ).redis("r")


@pytest.mark.unit
def test_the_blocking_twin_of_a_sentinel_client_follows_the_same_sentinels() -> None:
    from redis.sentinel import SentinelConnectionPool

    settings = SETTINGS.model_copy(update={"redis_sentinels": "127.0.0.1:1", "redis_sentinel_master": "m"})
    client = redis_client(settings=settings)
    twin = blocking_twin(client, 5)
    assert isinstance(twin.connection_pool, SentinelConnectionPool)
    assert twin.connection_pool is not client.connection_pool
    assert twin.connection_pool.service_name == "m"
    assert twin.connection_pool.sentinel_manager is client.connection_pool.sentinel_manager
    assert twin.connection_pool.connection_kwargs["socket_timeout"] == 15


@pytest.mark.integration
def test_a_sentinel_client_reaches_the_new_primary_after_a_failover(redis_sentinel_group, tmp_path: Path) -> None:
    """Once the sentinels have promoted the replica the same cached client writes there, and a script the
    new primary does not know is loaded again (NOSCRIPT: harvester.redis_scripts)."""
    from harvester.redis_keys import SourceKeys
    from harvester.redis_scripts import Scripts, declare_script

    group = redis_sentinel_group
    settings = SETTINGS.model_copy(update={"redis_url": f"redis://:{group.password}@127.0.0.1:1/0",
                                           "redis_sentinels": group.sentinels,
                                           "redis_sentinel_password": group.password})
    client = redis_client(settings=settings)
    (tmp_path / "common.lua").write_text("")
    (tmp_path / "incr.lua").write_text("return redis.call('INCRBY', KEYS[1], ARGV[1])\n")
    contract = declare_script("incr", "counter", "by", {"value": int}, directory=tmp_path, key_space=SourceKeys,
                              table=False, explicit_keys=("counter",))
    scripts = Scripts(client, [contract])
    call = lambda: scripts.call("incr", "any", {"counter": "n"}, by=1).value  # noqa: E731
    assert call() == 1
    assert client.wait(1, 5000) == 1  # replicated: asynchronous replication could otherwise lose it with the primary
    old = group.primary_port()
    group.kill_primary()
    group.wait_failover(old)
    deadline = time.monotonic() + 30
    while True:  # the first commands may still meet the dead primary's sockets: they fail, never hang
        try:
            client.execute_command("SCRIPT", "FLUSH")  # as on a primary that never saw the script
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "no command reached the new primary"
            time.sleep(0.2)
    value = call()
    assert value == 2  # the first write had reached the replica
    assert client.connection_pool.connection_kwargs  # the same cached client
    assert group.primary_port() == group.ports["replica"]


@pytest.mark.unit
def test_no_primary_during_a_failover_is_an_outage_callers_wait_out() -> None:
    """While the sentinels have no primary to name (between the loss and the promotion) a command fails with
    redis-py's MasterNotFoundError; at the boundary it is StorageUnavailableError, which every loop waits out."""
    from harvester.errors import StorageUnavailableError, redis_storage_errors
    from redis.sentinel import MasterNotFoundError

    with pytest.raises(StorageUnavailableError) as raised, redis_storage_errors():
        raise MasterNotFoundError("No master found for 'harvester'")
    assert isinstance(raised.value.__cause__, MasterNotFoundError)
