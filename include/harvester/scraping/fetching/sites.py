"""Which site a URL belongs to, and which origins a source's credentials may go to: a password never leaves its site.

Sites are told by the Public Suffix List as ``publicsuffixlist`` ships it (the package carries the list;
it is never fetched at run time): ``shop.example.co.uk`` and ``www.example.co.uk`` are one site,
``example.com`` and ``other.com`` are not, and ``com`` or ``co.uk`` is nobody's. An IP address is a site
of its own.

Credentials (an ``http_connection_id``'s basic auth, headers and cookies) go to the connection's own
origin (scheme, host and port) when it names a host, else to the origins of the source's seeds; never to
any other, whatever a page links or redirects to, robots.txt included. A source with neither sends its
credentials nowhere.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from publicsuffixlist import PublicSuffixList

from harvester.scraping.fetching.addresses import DEFAULT_PORTS

if TYPE_CHECKING:
    from harvester.config import SourceConfig
    from harvester.connections import HttpCredentials

__all__ = ["Origin", "credential_origins", "is_public_suffix", "origin_of_url", "registrable_domain", "same_site"]

Origin = tuple[str, str, int]  # scheme, lower-case host, port


@lru_cache(maxsize=1)
def _suffixes() -> PublicSuffixList:
    """The list the package ships (accept_unknown: an unlisted TLD is a suffix), read on first use: building it
    costs 60-90 ms of CPU, which importing the fetcher or the links no longer pays before a site is asked for."""
    return PublicSuffixList()


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


@lru_cache(maxsize=4096)
def is_public_suffix(domain: str) -> bool:
    """``com``, ``co.uk``, ``github.io``: a domain under which anybody may register a site."""
    domain = domain.strip(".").lower()
    return bool(domain) and not _is_address(domain) and bool(_suffixes().is_public(domain))


@lru_cache(maxsize=4096)
def registrable_domain(host: str) -> str:
    """The site of a host: its public suffix plus one label (``www.shop.co.uk`` → ``shop.co.uk``); an IP
    address or a bare public suffix is its own site."""
    host = host.strip(".").lower()
    if _is_address(host):
        return host
    return _suffixes().privatesuffix(host) or host


def same_site(url: str, other: str) -> bool:
    """Whether two URLs are on one site (same registrable domain), whatever their scheme or port."""
    first, second = urlsplit(url).hostname, urlsplit(other).hostname
    return bool(first) and bool(second) and registrable_domain(first or "") == registrable_domain(second or "")


def origin_of_url(url: str) -> Origin | None:
    """(scheme, host, port) of an http(s) URL, the port defaulted by the scheme; None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def credential_origins(source: SourceConfig, credentials: HttpCredentials) -> frozenset[Origin]:
    """The origins ``credentials`` may be sent to: the connection's own, else the source's seeds' (its seed URLs
    and the URLs of its first requests)."""
    if credentials.origin is not None:
        return frozenset({credentials.origin})
    seeds = [*source.input.seeds, *(seed.url for seed in source.input.requests)]
    return frozenset(origin for seed in seeds if (origin := origin_of_url(seed)) is not None)
