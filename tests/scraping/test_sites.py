"""Sites by the Public Suffix List and the origins credentials are bound to (scraping.fetching.sites), on their own:
the cookie jar, the next-page rule and both fetchers' credential binding rest on these answers."""

from __future__ import annotations

import pytest
from harvester.connections import HttpCredentials
from harvester.scraping.fetching.sites import (
    credential_origins,
    is_public_suffix,
    origin_of_url,
    registrable_domain,
    same_site,
)

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("domain,public", [
    ("com", True), ("co.uk", True), (".co.uk.", True), ("github.io", True), ("example.com", False),
    ("shop.example.co.uk", False), ("127.0.0.1", False), ("", False),
])
def test_public_suffixes_are_told_by_the_shipped_list(domain: str, public: bool) -> None:
    assert is_public_suffix(domain) is public


@pytest.mark.parametrize("host,site", [
    ("www.shop.co.uk", "shop.co.uk"), ("WWW.Example.COM.", "example.com"), ("a.b.example.com", "example.com"),
    ("user.github.io", "user.github.io"), ("co.uk", "co.uk"), ("10.0.0.1", "10.0.0.1"), ("[::1]", "[::1]"),
])
def test_a_hosts_site_is_its_public_suffix_and_one_label(host: str, site: str) -> None:
    assert registrable_domain(host) == site


def test_same_site_ignores_scheme_and_port_but_not_the_registrable_domain() -> None:
    assert same_site("http://www.shop.co.uk/a", "https://img.shop.co.uk:8443/b")
    assert not same_site("http://shop.co.uk/", "http://other.co.uk/")
    assert not same_site("http://alice.github.io/", "http://bob.github.io/")  # a suffix anybody registers under
    assert not same_site("http://shop.example/", "mailto:someone@shop.example")  # no host: no site


@pytest.mark.parametrize("url,origin", [
    ("http://Shop.Example/a", ("http", "shop.example", 80)),
    ("https://shop.example:8443/", ("https", "shop.example", 8443)),
    ("HTTPS://shop.example/", ("https", "shop.example", 443)), ("http://[::1]:81/", ("http", "::1", 81)),
    ("ftp://shop.example/", None), ("data:text/html,x", None), ("http://shop.example:99999/", None),
    ("http:///no-host", None),
])
def test_an_origin_is_scheme_host_and_port_with_the_default_port_filled_in(url: str, origin: object) -> None:
    assert origin_of_url(url) == origin


def test_credentials_are_bound_to_the_connections_origin_else_to_the_seeds_origins() -> None:
    source = demo_source("http://shop.example", "bound")
    source = source.model_copy(update={"input": source.input.model_copy(update={"seeds": [
        "http://shop.example/a", "https://shop.example/b", "http://shop.example:80/c", "ftp://shop.example/"]})})
    seeded = HttpCredentials("c", "env")
    assert credential_origins(source, seeded) == {("http", "shop.example", 80), ("https", "shop.example", 443)}
    own = HttpCredentials("c", "env", origin=("https", "api.shop.example", 443))
    assert credential_origins(source, own) == {("https", "api.shop.example", 443)}
