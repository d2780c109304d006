"""Link discovery on listing pages and URL canonicalisation, so one page has one spelling everywhere
(the duplicate-URL checker and the output's unique key both see the canonical form)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, urlencode, urljoin, urlsplit, urlunsplit

from parsel import Selector

from harvester.config.model import SourceConfig

TRACKING_PARAMETERS = frozenset({
    "gclid", "gclsrc", "dclid", "fbclid", "msclkid", "yclid", "igshid", "mc_cid", "mc_eid", "_ga", "_gl",
    "_hsenc", "_hsmi", "mkt_tok", "wt.mc_id", "oly_anon_id", "oly_enc_id", "vero_id", "spm",
})
TRACKING_PREFIXES = ("utm_", "pk_", "hsa_")
DEFAULT_PORTS = {"http": 80, "https": 443}
PATH_SAFE = "/%:@!$&'()*+,;=-._~"  # RFC 3986 pchar; existing escapes are kept


def canonicalise_url(url: str, base: str | None = None) -> str | None:
    """The canonical form of a link, or None when it is not an http(s) URL we could fetch.

    Resolves relative links against ``base``, lower-cases scheme and host, drops default ports,
    fragments and tracking parameters, and sorts the query.
    """
    url = (url or "").strip()
    if not url:
        return None
    try:
        if base is not None:
            url = urljoin(base, url)
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname.lower().rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    if parts.username:
        netloc = f"{parts.username}{':' + parts.password if parts.password else ''}@{netloc}"
    query = sorted(
        (key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True)
        if key.lower() not in TRACKING_PARAMETERS and not key.lower().startswith(TRACKING_PREFIXES)
    )
    path = quote(parts.path or "/", safe=PATH_SAFE)
    return urlunsplit((scheme, netloc, path, urlencode(query), ""))


def select_links(selector: Selector, expressions: list[str]) -> list[str]:
    """Raw link strings selected by CSS (or ``xpath:...``) expressions; elements give their href."""
    found: list[str] = []
    for expression in expressions:
        if expression.startswith("xpath:"):
            nodes = selector.xpath(expression[len("xpath:"):])
        else:
            nodes = selector.css(expression)
        for node in nodes:
            if isinstance(node.root, str):
                found.append(node.root)
            else:
                href = node.attrib.get("href")
                if href is not None:
                    found.append(href)
    return found


@dataclass
class Discovery:
    """What a listing page leads to, before the duplicate-URL checker and the per-run cap."""

    details: list[str] = field(default_factory=list)
    listings: list[str] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)

    def ignore(self, reason: str) -> None:
        self.ignored[reason] = self.ignored.get(reason, 0) + 1


def discover_links(source: SourceConfig, page_url: str, selector: Selector, depth: int) -> Discovery:
    """Detail links matching the follow pattern, and next listing pages while depth < max_depth."""
    discovery = Discovery()
    listing = source.listing
    if listing is None:
        return discovery
    follow = re.compile(listing.follow)
    seen: set[str] = set()
    for raw in select_links(selector, listing.link_selectors):
        url = canonicalise_url(raw, page_url)
        if url is None:
            discovery.ignore("not_http")
        elif not follow.search(url):
            discovery.ignore("not_followed")
        elif url in seen:
            discovery.ignore("repeated_on_page")
        else:
            seen.add(url)
            discovery.details.append(url)
    if listing.next_page_selectors:
        for raw in select_links(selector, listing.next_page_selectors):
            url = canonicalise_url(raw, page_url)
            if url is None:
                discovery.ignore("not_http")
            elif depth + 1 > listing.max_depth:
                discovery.ignore("beyond_max_depth")
            elif url not in seen:
                seen.add(url)
                discovery.listings.append(url)
    return discovery
