"""Hostile sites on the fetch side, each against the real demo site over real HTTP: bounded
decompression, one content encoding, safe redirects and addresses, believable Retry-After, the page's
own charset, robots.txt and basic auth from an HTTP connection. Each failed on the code before."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from harvester.connections import ConnectionNotFound, HttpCredentials, resolve_http
from harvester.scraping.fetching.addresses import AddressGuard, AddressRefused, parse_allowed_networks, strip_userinfo
from harvester.scraping.fetching.bodies import BodyRefused, decoder_for
from harvester.scraping.fetching.fetcher import Fetcher, FetchResult
from harvester.scraping.fetching.responses import Verdict, parse_retry_after
from harvester.scraping.fetching.robots import RobotsCache, RobotsRules
from harvester.scraping.page import process_page
from harvester.settings import HarvesterSettings
from harvester_demo.hostile import BASIC_AUTH_PASSWORD, BASIC_AUTH_USER, POLITE_AGENT

from tests.fixtures.demo_site import demo_source, demo_source_document

CAP = 512 * 1024


def fetch(url: str, source=None, **settings: object) -> FetchResult:
    source = source or demo_source("http://127.0.0.1:9", timeout=10)
    options = {"body_size_cap_bytes": CAP, **settings}

    async def run() -> FetchResult:
        async with Fetcher(HarvesterSettings(**options)) as fetcher:
            return await fetcher.fetch(url, source)

    return asyncio.run(run())


# -- Retry-After ---------------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("value", ["99999999999", "9" * 400, "Fri, 31 Dec 9999 23:59:59 GMT", "1e309", "-5"])
def test_absurd_retry_after_values_are_refused(value: str) -> None:
    assert parse_retry_after(value) is None


@pytest.mark.unit
def test_believable_retry_after_values_still_parse() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("0007") == 7.0


# -- bodies --------------------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("encoding", ["gzip, gzip", "gzip,deflate", "compress", "zstd, gzip"])
def test_only_one_known_content_encoding_is_accepted(encoding: str) -> None:
    with pytest.raises(BodyRefused):
        decoder_for(encoding)


@pytest.mark.integration
def test_double_gzip_bomb_is_refused_without_decoding_it(demo_site) -> None:
    """The issue's 1,827-byte `gzip, gzip` body took a worker to 2.1 GB and blocked its loop for 21.5 s."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    result = fetch(f"{demo_site.url}/hostile/gzip-bomb?mb=2048&layers=2", source=demo_source(demo_site.url, timeout=60))
    assert result.outcome == "decode_error" and "more than one content encoding" in result.reason
    assert result.verdict is Verdict.PERMANENT
    assert time.monotonic() - started < 30  # generous: the bomb is built by the site on first request
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB: far below 2 GB


@pytest.mark.integration
def test_one_gzip_layer_is_decoded_up_to_the_cap_only(demo_site) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = fetch(f"{demo_site.url}/hostile/gzip-bomb?mb=64&layers=1")
    assert result.ok and result.truncated and result.size == CAP
    assert "decoded bytes" in result.reason
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 48 * 1024  # 64 MiB never held


@pytest.mark.integration
def test_corrupt_and_stacked_encodings_are_per_page_outcomes(demo_site) -> None:
    corrupt = fetch(f"{demo_site.url}/hostile/corrupt-gzip")
    assert corrupt.outcome == "decode_error" and "corrupt" in corrupt.reason
    double = fetch(f"{demo_site.url}/hostile/double-gzip")
    assert double.outcome == "decode_error" and "gzip, gzip" in double.reason
    assert not corrupt.retryable and not double.retryable


# -- addresses -----------------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("url", [
    "http://127.0.0.2/", "http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/", "http://10.1.2.3/",
    "http://192.168.0.1/", "http://224.0.0.1/", "http://0.0.0.0/", "http://[::1]/", "http://[::ffff:127.0.0.1]/",
    "file:///etc/passwd", "ftp://example.org/",
])
def test_private_and_non_http_targets_are_refused(url: str) -> None:
    guard = AddressGuard(parse_allowed_networks("127.0.0.1/32"))
    with pytest.raises(AddressRefused):
        asyncio.run(guard.check(url))


@pytest.mark.unit
def test_allow_list_may_name_one_port() -> None:
    guard = AddressGuard(parse_allowed_networks("127.0.0.1/32:8008, 10.0.0.0/8"))
    assert guard.address_refusal(ipaddress.ip_address("127.0.0.1"), 8008) is None
    assert "loopback" in guard.address_refusal(ipaddress.ip_address("127.0.0.1"), 6379)
    assert guard.address_refusal(ipaddress.ip_address("10.9.9.9"), 1) is None
    asyncio.run(guard.check("http://localhost:8008/")) if _localhost_is_ipv4_only() else None
    assert strip_userinfo("http://user:secret@example.org/a") == "http://example.org/a"


@pytest.mark.unit
@pytest.mark.parametrize("peer", [None, (), "127.0.0.1", ("/run/some.sock",), ("not-an-address", 80)])
def test_a_peer_that_cannot_be_told_is_refused(peer: object) -> None:
    """The peer check fails closed in the guard itself, whichever transport asks (it used to pass such peers,
    and only the fetcher's caller refused the first two kinds)."""
    guard = AddressGuard(parse_allowed_networks("127.0.0.1/32"))
    with pytest.raises(AddressRefused, match="refused"):
        guard.check_peer(peer, 80)
    guard.check_peer(("127.0.0.1", 80), 80)  # a told, allowed peer passes


def _localhost_is_ipv4_only() -> bool:
    import socket

    return {info[4][0] for info in socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)} == {"127.0.0.1"}


@pytest.mark.integration
@pytest.mark.parametrize("target,reason", [
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://127.0.0.2:{port}/product/1", "loopback"),
    ("file:///etc/passwd", "scheme refused"),
])
def test_redirects_to_forbidden_targets_are_refused_and_not_retried(demo_site, target: str, reason: str) -> None:
    result = fetch(f"{demo_site.url}/hostile/redirect?to={target.format(port=demo_site.port)}")
    assert result.outcome == "refused" and reason in result.reason
    assert not result.retryable


@pytest.mark.integration
def test_a_redirect_to_another_port_of_an_allowed_address_is_refused(demo_site, redis_server) -> None:
    """``make run`` allows the demo site's port only: a redirect to our own Redis is refused."""
    allowed = f"127.0.0.1/32:{demo_site.port}"
    result = fetch(f"{demo_site.url}/hostile/redirect?to=http://127.0.0.1:{redis_server.port}/",
                   allowed_private_networks=allowed)
    assert result.outcome == "refused" and "loopback" in result.reason
    assert fetch(f"{demo_site.url}/product/1", allowed_private_networks=allowed).ok


@pytest.mark.integration
def test_loopback_is_refused_without_the_allow_list(demo_site) -> None:
    result = fetch(f"{demo_site.url}/product/1", allowed_private_networks="")
    assert result.outcome == "refused" and "loopback" in result.reason


@pytest.mark.integration
def test_userinfo_is_dropped_from_the_url(demo_site) -> None:
    result = fetch(f"http://user:secret@127.0.0.1:{demo_site.port}/product/1")
    assert result.ok and "secret" not in result.url and "secret" not in result.final_url


# -- decoding ------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_meta_charset_decides_the_encoding_when_the_header_does_not(demo_site) -> None:
    url = f"{demo_site.url}/hostile/meta-charset"
    page = process_page(demo_source(demo_site.url), "details", url, 0, fetch(url))
    assert page.extraction.record["title"] == "Caf\u00e9 cr\u00e8me \u201cspecial\u201d"


# -- robots.txt ----------------------------------------------------------------------------------------
@pytest.mark.unit
def test_robots_rules_map_crawl_delay_and_request_rate() -> None:
    rules = RobotsRules("http://x", "User-agent: Slow\nCrawl-delay: 2\nRequest-rate: 1/10s\n"
                                    "User-agent: *\nDisallow: /no/\n")
    assert rules.min_interval_seconds("Slow/1.0 (+https://x)") == 10.0
    assert rules.min_interval_seconds("Harvester/0.1.0") == 0.0
    assert not rules.allowed("http://x/no/1", "Harvester/0.1.0") and rules.allowed("http://x/yes", "Harvester/0.1.0")


@pytest.mark.integration
def test_robots_disallowed_pages_are_skipped_unless_the_source_ignores_robots(demo_site, redis_client) -> None:
    url = f"{demo_site.url}/private/1"
    cache = RobotsCache(redis_client, cache_seconds=24 * 3600.0)

    async def run(source) -> list[FetchResult]:
        async with Fetcher(HarvesterSettings(), robots=cache) as fetcher:
            return list(await asyncio.gather(*(fetcher.fetch(url, source) for _ in range(3))))

    obeying = asyncio.run(run(demo_source(demo_site.url)))
    assert {result.outcome for result in obeying} == {"robots_disallowed"}
    assert not obeying[0].retryable and "robots.txt" in obeying[0].reason
    assert demo_site.client_stats("demo_test")["robots"] == 1  # fetched once, then cached
    assert redis_client.ttl(f"harvester:robots:{demo_site.url}") <= 24 * 3600
    ignoring = asyncio.run(run(demo_source(demo_site.url, robots="ignore")))
    assert all(result.ok for result in ignoring)


@pytest.mark.unit
def test_default_user_agent_names_harvester_and_its_contact() -> None:
    settings = HarvesterSettings(contact_url="https://example.org/crawler")
    assert settings.user_agent.startswith("Harvester/") and "https://example.org/crawler" in settings.user_agent
    assert "Chrome" not in HarvesterSettings().user_agent


# -- authenticated sites -------------------------------------------------------------------------------
@pytest.mark.integration
def test_basic_auth_comes_from_the_http_connection(demo_site, monkeypatch) -> None:
    url = f"{demo_site.url}/auth/basic/3"
    assert fetch(url).status == 401
    monkeypatch.setenv("AIRFLOW_CONN_DEMO_LOGIN",
                       json.dumps({"conn_type": "http", "login": BASIC_AUTH_USER, "password": BASIC_AUTH_PASSWORD}))
    result = fetch(url, source=demo_source(demo_site.url, http_connection_id="demo_login"))
    assert result.ok and "SKU-00003" in result.text


@pytest.mark.unit
def test_http_connection_extras_give_headers_and_cookies_and_never_show_secrets(monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SITE_TOKEN", json.dumps({
        "conn_type": "http", "extra": {"headers": {"X-Api-Key": "k-123"}, "cookies": {"session": "s-456"}}}))
    credentials = resolve_http("site_token")
    assert isinstance(credentials, HttpCredentials)
    assert credentials.headers == {"X-Api-Key": "k-123"} and credentials.cookies == {"session": "s-456"}
    assert "k-123" not in repr(credentials) and "s-456" not in str(credentials)
    with pytest.raises(ConnectionNotFound):
        resolve_http("nobody_defined_this")


@pytest.mark.integration
def test_harvester_try_shows_each_refusal_with_its_reason(demo_site, tmp_path: Path) -> None:
    source_file = tmp_path / "hostile.yaml"
    source_file.write_text(yaml.safe_dump(demo_source_document(demo_site.url, "hostile_try")))
    cases = {
        "/hostile/gzip-bomb?mb=2048&layers=2": "more than one content encoding",
        "/hostile/corrupt-gzip": "corrupt",
        "/hostile/redirect?to=http://169.254.169.254/latest/meta-data/": "link-local",
        "/hostile/redirect?to=file:///etc/passwd": "scheme refused",
        "/private/2": "robots.txt",
        "/hostile/retry-after?value=99999999999": "HTTP 429",
    }
    demo_site.warm("/hostile/gzip-bomb?mb=2048&layers=2")  # built by the site first: the client's 5 s are not for that
    for path, reason in cases.items():
        completed = subprocess.run(
            [sys.executable, "-m", "harvester.cli", "try", str(source_file), f"{demo_site.url}{path}", "--json"],
            capture_output=True, text=True, timeout=120)
        assert completed.returncode == 1, completed.stderr
        report = json.loads(completed.stdout.strip().splitlines()[-1])
        assert reason in (report["reason"] or ""), (path, report)
    polite = demo_source_document(demo_site.url, "polite_try", headers={"User-Agent": f"{POLITE_AGENT}/1.0"})
    assert polite["headers"]["User-Agent"].startswith(POLITE_AGENT)
