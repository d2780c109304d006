"""Wait until a service answers, so a start step fails fast with a clear reason instead of hanging."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harvester.errors import ServiceNotReady
from harvester.services.ports import LOOPBACK

if TYPE_CHECKING:
    from harvester.connections import RedisTarget


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll ``check`` until it returns True; raise :class:`ServiceNotReady` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as error:  # the service is still starting: any failure means "not yet"
            last_error = error
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    raise ServiceNotReady(f"{what} not ready after {timeout:.0f}s{detail}")


def tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def redis_ping(url: str) -> bool:
    from harvester.connections import open_redis_client

    client = open_redis_client(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    finally:
        client.close()


def sentinel_knows_primary(port: int, master_name: str, password: str | None = None) -> bool:
    """The sentinel on ``port`` answers and names a primary for ``master_name``."""
    from harvester.connections import open_redis_client

    client = open_redis_client(f"redis://{LOOPBACK}:{port}/0", socket_timeout=1, socket_connect_timeout=1,
                               password=password or None)
    try:
        return bool(client.sentinel_get_master_addr_by_name(master_name))
    finally:
        client.close()


def mongo_ping(uri: str) -> bool:
    from harvester.connections import open_mongo_client

    client = open_mongo_client(uri, serverSelectionTimeoutMS=1000, connectTimeoutMS=1000)
    try:
        return client.admin.command("ping").get("ok") == 1
    finally:
        client.close()


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return 200 <= response.status < 400
    except urllib.error.URLError:
        return False


def celery_nodes_answer(broker_url: str, *args: Any) -> bool:
    """`celery inspect ping -d <node>` for every node, in-process (one broker round trip): ``(url, nodes)``,
    or ``(url, transport_options, nodes)`` for a broker that needs them (``sentinel://`` and its master_name)."""
    from celery import Celery

    *options, nodes = args
    probe = Celery("probe", broker=broker_url)
    if options:
        probe.conf.broker_transport_options = options[0]
    try:
        replies = probe.control.ping(destination=nodes, timeout=1.0)
    finally:
        probe.close()
    answered = {name for reply in replies for name in reply}
    return set(nodes) <= answered


def distributor_heartbeat_fresh(redis_url: str | RedisTarget, name: str, max_age: float = 90.0) -> bool:
    """What `harvester health distributor --name NAME` checks: its heartbeat is at most ``max_age`` old."""
    from harvester.connections import open_redis_client
    from harvester.redis_keys import distributor_heartbeat

    client = open_redis_client(redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        raw = client.get(distributor_heartbeat(name))
    finally:
        client.close()
    return raw is not None and time.time() - float(raw) <= max_age


def airflow_component_healthy(airflow_url: str, component: str) -> bool:
    """The API server's health report shows the component's heartbeat (``dag_processor``, ``triggerer``)."""
    import httpx

    health = httpx.get(f"{airflow_url}/api/v2/monitor/health", timeout=5).json()
    return health.get(component, {}).get("status") == "healthy"
