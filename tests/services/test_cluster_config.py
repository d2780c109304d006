"""The cluster's configuration mirrors docker-compose.yaml: who sees which secret, ports, data placement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harvester.services.cluster import Cluster, ClusterPorts, ClusterSecrets, WorkerMachine

pytestmark = pytest.mark.unit


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path / "cluster", ClusterPorts(), mongo_uri="mongodb://127.0.0.1:1/",
                   demo_site_url="http://127.0.0.1:2", environ={"PATH": "/usr/bin", "HARVESTER_REDIS_URL": "x",
                                                                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor"})


def test_secrets_are_generated_once_and_kept_private(tmp_path: Path) -> None:
    first = ClusterSecrets.load_or_create(tmp_path / "secrets.json")
    assert ClusterSecrets.load_or_create(tmp_path / "secrets.json") == first
    assert (tmp_path / "secrets.json").stat().st_mode & 0o077 == 0
    assert all(len(value) >= 16 for value in vars(first).values())


def test_workers_and_the_distributor_see_no_airflow_secret(cluster: Cluster) -> None:
    secrets = cluster.secrets
    airflow_only = (secrets.postgres_password, secrets.fernet_key, secrets.api_secret_key, secrets.jwt_secret,
                    secrets.admin_password)
    for env in (cluster.harvester_environment(), cluster.harvester_redis_environment()):
        assert not any(key.startswith("AIRFLOW__") for key in env)
        assert not any(secret in value for value in env.values() for secret in airflow_only)
        assert env["HARVESTER_REDIS_URL"] == cluster.redis_url  # the caller's own HARVESTER_* do not leak in
    assert "HARVESTER_MONGO_URI" not in cluster.harvester_redis_environment()
    airflow = cluster.airflow_environment()
    assert airflow["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert airflow["AIRFLOW__CORE__FERNET_KEY"] == secrets.fernet_key
    assert airflow["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "False"


def test_every_redis_url_carries_the_password_and_airflow_uses_another_database(cluster: Cluster) -> None:
    password = cluster.secrets.redis_password
    assert cluster.redis_url.startswith(f"redis://:{password}@127.0.0.1:") and cluster.redis_url.endswith("/0")
    assert cluster.airflow_broker_url.endswith("/1")
    redis = next(service for service in cluster.infrastructure() if service.name == "redis")
    command = redis.commands[0]
    assert command[command.index("--requirepass") + 1] == password
    assert command[command.index("--bind") + 1] == "127.0.0.1"


def test_ports_default_beside_make_run_and_move_with_the_environment() -> None:
    ports = ClusterPorts.from_environment({"HARVESTER_CLUSTER_AIRFLOW_PORT": "9999"})
    assert ports.airflow == 9999 and ports.redis == 6380 and ports.postgres == 5433
    assert len(set(vars(ClusterPorts.free()).values())) == len(vars(ports))


def test_worker_machines_run_the_compose_commands_with_their_own_node_names(cluster: Cluster) -> None:
    http = cluster.machine_service(WorkerMachine("machine-a", "http"))
    names = [command[command.index("-n") + 1] for command in http.commands]
    assert names == ["priority@machine-a", "default@machine-a"]
    assert [command[command.index("-Q") + 1] for command in http.commands] == ["priority", "default"]
    [slots] = cluster.machine_service(WorkerMachine("machine-c", "pageslots", concurrency=3)).commands
    assert slots[slots.index("-n") + 1] == "pageslots@machine-c"
    assert slots[slots.index("--pool") + 1] == "prefork" and slots[slots.index("--concurrency") + 1] == "3"
    assert slots[slots.index("-Q") + 1].split(",")[0] == "pageslots"


def test_postgres_data_is_reachable_by_the_postgres_user_when_run_as_root(cluster: Cluster) -> None:
    if os.geteuid() == 0:
        assert not cluster.postgres_data.is_relative_to(cluster.base_dir)
        [postgres] = [service for service in cluster.infrastructure() if service.name == "postgres"]
        assert postgres.user == "postgres"
    else:
        assert cluster.postgres_data == cluster.base_dir / "postgres"


def test_redis_is_a_primary_a_replica_and_three_sentinels_and_every_client_asks_the_sentinels(
        cluster: Cluster) -> None:
    from harvester.connections import EnvironmentResolver

    services = {service.name: service for service in cluster.infrastructure()}
    replica = services["redis-replica"].command
    assert replica[replica.index("--replicaof") + 2] == str(cluster.ports.redis)
    assert replica[replica.index("--masterauth") + 1] == cluster.secrets.redis_password
    sentinels = [services[f"redis-sentinel-{number}"] for number in (1, 2, 3)]
    for sentinel in sentinels:
        assert sentinel.command[-1] == "--sentinel"
        [(path, text)] = sentinel.files
        assert path.name == "sentinel.conf"
        assert f"sentinel monitor harvester 127.0.0.1 {cluster.ports.redis} 2" in text
        assert f"requirepass {cluster.secrets.redis_password}" in text
    assert sorted(sentinel.port for sentinel in sentinels) == cluster.sentinel_ports
    for env in (cluster.harvester_environment(), cluster.harvester_redis_environment(), cluster.airflow_environment()):
        assert env["HARVESTER_REDIS_SENTINELS"] == ",".join(f"127.0.0.1:{port}" for port in cluster.sentinel_ports)
        target = EnvironmentResolver(env).redis("redis_default")
        assert target is not None and target.sentinels == tuple(("127.0.0.1", port) for port in cluster.sentinel_ports)
        assert target.sentinel_password == cluster.secrets.redis_password
    airflow = cluster.airflow_environment()
    assert airflow["AIRFLOW__CELERY__BROKER_URL"].count("sentinel://") == 3
    assert airflow["AIRFLOW__CELERY__BROKER_URL"].endswith("/1")
    assert airflow["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__MASTER_NAME"] == "harvester"
    url, options = cluster.broker
    assert url.startswith("sentinel://") and url.endswith("/0") and options["master_name"] == "harvester"
