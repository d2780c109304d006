"""A country's proxy pool (harvester.pageslots.proxy_pool) with real Redis and real `harvester forward-proxy`
processes: the pool read from its Airflow connections, the shared health (out after consecutive failures for a
backoff with jitter, back after a success), and the browser guard failing a connection over to the pool's other
proxy when one dies mid-run, with every request answered and the dead proxy's failures counted."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from harvester.pageslots.proxy_pool import (
    BACKOFF_BASE_SECONDS,
    FAILURES_ALLOWED,
    HealthTrackedPool,
    ProxyHealth,
    proxy_pool,
)
from harvester.redis_keys import PageSlotKeys
from harvester.scraping.browser.guard_proxy import PROXY_ERROR_HEADER, GuardProxy
from harvester.scraping.fetching.addresses import AddressGuard, parse_allowed_networks
from harvester.services.ports import free_port

from tests.scraping.test_guard_proxy import ask

pytestmark = pytest.mark.integration


async def get_through(proxy: GuardProxy, url: str, host: str) -> bytes:
    """One GET through the guard, read to its Content-Length and then closed, as a browser does (a forward
    proxy's tunnel lives until both sides end, so reading to EOF would wait for ever)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", int(proxy.server.rsplit(":", 1)[1]))
    try:
        writer.write(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        return head + await asyncio.wait_for(reader.readexactly(length), 10)
    finally:
        writer.close()


def test_a_pool_is_the_country_connection_then_its_numbered_ones_in_numeric_order() -> None:
    environ = {"AIRFLOW_CONN_PROXY_SG_10": "http://10.0.0.10:3128", "AIRFLOW_CONN_PROXY_SG": "http://u:p@10.0.0.1:3128",
               "AIRFLOW_CONN_PROXY_SG_2": "http://10.0.0.2:3128", "AIRFLOW_CONN_PROXY_SGX": "http://10.9.9.9:1",
               "AIRFLOW_CONN_PROXY_MY": "http://10.0.1.1:3128"}
    pool = proxy_pool("SG", environ)
    assert [(proxy.connection_id, proxy.server) for proxy in pool] == [
        ("proxy_sg", "http://10.0.0.1:3128"), ("proxy_sg_2", "http://10.0.0.2:3128"),
        ("proxy_sg_10", "http://10.0.0.10:3128")]
    assert (pool[0].username, pool[0].password) == ("u", "p")
    assert proxy_pool("ID", environ) == []


def test_consecutive_failures_take_a_proxy_out_for_a_jittered_backoff_and_a_success_brings_it_back(
        redis_client: redis.Redis) -> None:
    health = ProxyHealth(redis_client)
    pool = ["proxy_sg", "proxy_sg_2"]
    for _ in range(FAILURES_ALLOWED - 1):
        assert health.report("SG", "proxy_sg", ok=False)[0] == "in"
    state, failures, out_for = health.report("SG", "proxy_sg", ok=False)
    assert (state, failures) == ("out", FAILURES_ALLOWED)
    assert 0.75 * BACKOFF_BASE_SECONDS <= out_for <= 1.25 * BACKOFF_BASE_SECONDS
    assert all(health.choose("SG", pool) == ["proxy_sg_2"] for _ in range(4))
    _, _, longer = health.report("SG", "proxy_sg", ok=False)  # a failed probe: out twice as long
    assert 1.5 * BACKOFF_BASE_SECONDS <= longer <= 2.5 * BACKOFF_BASE_SECONDS
    health.report("SG", "proxy_sg_2", ok=False)
    health.report("SG", "proxy_sg_2", ok=False)
    assert health.choose("SG", pool) == ["proxy_sg_2"]  # every one out: only the soonest back, as a probe
    assert health.report("SG", "proxy_sg", ok=True) == ("in", 0, 0.0)
    assert health.choose("SG", pool) == ["proxy_sg"]
    states = health.states("SG")
    assert states["proxy_sg"].errors == FAILURES_ALLOWED + 1 and states["proxy_sg"].requests == FAILURES_ALLOWED + 2
    assert states["proxy_sg_2"].out(float(redis_client.time()[0]))
    assert PageSlotKeys().proxy_health("SG") in {key.decode() for key in redis_client.keys("*proxy-health*")}


def test_the_living_proxies_take_turns(redis_client: redis.Redis) -> None:
    health = ProxyHealth(redis_client)
    firsts = [health.choose("SG", ["proxy_sg", "proxy_sg_2", "proxy_sg_3"])[0] for _ in range(6)]
    assert sorted(firsts) == ["proxy_sg", "proxy_sg", "proxy_sg_2", "proxy_sg_2", "proxy_sg_3", "proxy_sg_3"]


def test_a_host_that_banned_a_proxy_is_offered_the_others_first_until_the_ban_ends(redis_client: redis.Redis) -> None:
    health = ProxyHealth(redis_client)
    pool = ["proxy_sg", "proxy_sg_2", "proxy_sg_3"]
    assert health.ban("SG", "proxy_sg", "shop.example", pool, seconds=0.6) == 2  # two exits still welcome it
    assert all(health.choose("SG", pool, "shop.example")[-1] == "proxy_sg" for _ in range(6))
    assert sorted(health.choose("SG", pool, "shop.example")) == sorted(pool)  # last, never dropped
    assert {health.choose("SG", pool, "other.example")[0] for _ in range(6)} == set(pool)  # other hosts: no ban
    assert health.ban("SG", "proxy_sg_2", "shop.example", pool, seconds=0.6) == 1
    assert health.ban("SG", "proxy_sg_3", "shop.example", pool, seconds=0.6) == 0  # rotation cannot help now
    assert sorted(health.choose("SG", pool, "shop.example")) == sorted(pool)  # every one banned: all keep turns
    assert 0 < redis_client.pttl(PageSlotKeys().proxy_bans("SG")) <= 1000  # the bans' hash goes with the last ban
    time.sleep(0.7)
    assert {health.choose("SG", pool, "shop.example")[0] for _ in range(6)} == set(pool)  # the bans ended
    assert [health.states("SG")[proxy].bans for proxy in pool] == [1, 1, 1]


def test_a_proxy_killed_mid_run_costs_no_request_and_its_failures_are_counted(
        redis_client: redis.Redis, forward_proxy_factory, site, monkeypatch) -> None:
    site.route("/page", text="hello", content_type="text/plain")
    first, second = forward_proxy_factory("SG-1"), forward_proxy_factory("SG-2")
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG", first.url)
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG_2", second.url)
    health = ProxyHealth(redis_client)
    pool = HealthTrackedPool("SG", proxy_pool("SG"), health)
    answers: list[bytes] = []

    async def run() -> GuardProxy:
        proxy = GuardProxy(AddressGuard(parse_allowed_networks("127.0.0.1/32")), pool, connect_timeout=5)
        await proxy.start()
        try:
            for index in range(40):
                if index == 10:
                    await asyncio.to_thread(first.server.kill)
                answers.append(await get_through(proxy, f"{site.url}/page", f"127.0.0.1:{site.port}"))
        finally:
            await proxy.close()
        return proxy

    guard = asyncio.run(run())
    assert [answer.split(b"\r\n", 1)[0] for answer in answers] == [b"HTTP/1.1 200 OK"] * 40
    assert all(answer.endswith(b"hello") for answer in answers)
    assert guard.proxy_failures >= 1 and guard.proxy_errors == 0
    states = health.states("SG")
    assert states["proxy_sg"].errors == guard.proxy_failures
    assert states["proxy_sg"].out(float(redis_client.time()[0]))  # out: no later connection tried it again
    assert guard.proxy_failures <= FAILURES_ALLOWED
    assert second.stats()["requests"] >= 30  # every request after the death went through it


def test_a_pool_with_no_living_proxy_answers_a_proxy_error_not_a_site_failure(
        redis_client: redis.Redis, site) -> None:
    from harvester.pageslots.proxies import Proxy

    dead = [Proxy("SG", f"http://127.0.0.1:{free_port('127.0.0.1')}", connection_id=f"proxy_sg_{n}") for n in (1, 2)]
    pool = HealthTrackedPool("SG", dead, ProxyHealth(redis_client))

    async def run() -> tuple[bytes, GuardProxy]:
        proxy = GuardProxy(AddressGuard(parse_allowed_networks("127.0.0.1/32")), pool, connect_timeout=5)
        await proxy.start()
        try:
            return await ask(proxy, f"GET {site.url}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()), proxy
        finally:
            await proxy.close()

    started = time.monotonic()
    answer, guard = asyncio.run(run())
    assert answer.startswith(b"HTTP/1.1 502") and PROXY_ERROR_HEADER.encode() in answer
    assert b"proxy_sg_1" in answer and b"proxy_sg_2" in answer
    assert (guard.proxy_failures, guard.proxy_errors) == (2, 1)
    assert time.monotonic() - started < 5
    assert site.seen == []


def test_each_proxy_s_figures_move_when_it_carries_fails_and_is_banned_on_the_page_and_in_the_metrics(
        redis_client: redis.Redis, forward_proxy_factory, site, monkeypatch, harvester_settings) -> None:
    from harvester.metrics.collector import metrics_registry
    from harvester.pageslots import proxy_figures

    from tests.metrics.helpers import scrape, value

    site.route("/page", text="hello", content_type="text/plain")
    living = forward_proxy_factory("SG-1")
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG", living.url)
    monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG_2", f"http://127.0.0.1:{free_port('127.0.0.1')}")  # nobody listens
    pool = HealthTrackedPool("SG", proxy_pool("SG"), ProxyHealth(redis_client))
    registry = metrics_registry(redis_client, harvester_settings)

    async def run() -> int:
        proxy = GuardProxy(AddressGuard(parse_allowed_networks("127.0.0.1/32")), pool, connect_timeout=5)
        await proxy.start()
        try:
            for _ in range(4):
                await get_through(proxy, f"{site.url}/page", f"127.0.0.1:{site.port}")
            await pool.ban("proxy_sg", "127.0.0.1")
            deadline = time.monotonic() + 5  # each connection's bytes are counted as it ends, after the answer
            while pool.health.states("SG")["proxy_sg"].bytes < proxy.bytes_relayed and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return proxy.bytes_relayed
        finally:
            await proxy.close()

    relayed = asyncio.run(run())
    figures = {member["proxy"]: member for member in proxy_figures(redis_client)["SG"]}
    assert figures["proxy_sg"]["requests"] == 4 and figures["proxy_sg"]["bans"] == 1
    assert figures["proxy_sg"]["bytes"] == relayed > 4 * len("hello") and figures["proxy_sg"]["state"] == "in"
    assert figures["proxy_sg_2"]["errors"] >= 1 and figures["proxy_sg_2"]["bytes"] == 0
    assert figures["proxy_sg_2"]["state"] == ("out" if figures["proxy_sg_2"]["errors"] >= FAILURES_ALLOWED else "in")
    samples = scrape(registry)
    for name in ("requests", "errors", "bans", "bytes"):
        for proxy_name, member in figures.items():
            shown = value(samples, f"harvester_proxy_member_{name}_total", country="SG", proxy=proxy_name)
            assert shown == member[name], (name, proxy_name)
    assert value(samples, "harvester_proxy_member_out", country="SG", proxy="proxy_sg") == 0


def test_with_redis_down_every_reader_and_writer_of_the_proxies_state_raises_the_storage_error() -> None:
    """The shared health and the slot hosts' byte counts live in Redis: its outage is the caller's StorageError (a
    batch retried, the metrics' harvester_redis_up 0), never a redis-py error read as a site's or a crash."""
    from harvester.connections import open_redis_client
    from harvester.errors import StorageUnavailableError
    from harvester.pageslots import proxy_bytes_by_country, proxy_figures

    closed = open_redis_client("redis://127.0.0.1:1/0", socket_connect_timeout=1)  # nothing listens on port 1
    health = ProxyHealth(closed)
    for call in (lambda: health.choose("sg", ["proxy_sg"], "shop.example"),
                 lambda: health.report("sg", "proxy_sg", True),
                 lambda: health.ban("sg", "proxy_sg", "shop.example", ["proxy_sg"]), lambda: health.states("sg"),
                 lambda: health.carried("sg", "proxy_sg", 10), lambda: proxy_figures(closed),
                 lambda: proxy_bytes_by_country(closed)):
        with pytest.raises(StorageUnavailableError):
            call()
