"""Cookies of the HTTP fetcher: one jar per source in a worker process, public-suffix aware: sources share none.

A site's ``Set-Cookie`` goes into the jar of the source whose request got it, never into one another source
reads: two sources on one site (or one worker serving many sources) share nothing. The jar is the standard
library's RFC 6265-minded :class:`http.cookiejar.CookieJar` (domain and path matching, expiry, ``Secure``
only over https) with a policy that refuses a ``Domain`` that is a public suffix (``Domain=com``,
``Domain=co.uk``) by the list ``publicsuffixlist`` ships. The transports keep no cookies of their own.

A source's HTTP connection's cookies always win: a jar cookie of the same name is not sent beside it.

A site cannot fill the jar to make every request heavy (3,000 cookies made a 329 kB ``Cookie`` header): a host
keeps its first ``MAX_COOKIES_PER_HOST`` cookies (a site's later ones are dropped), and the header sent carries
at most ``MAX_COOKIE_HEADER_BYTES``, the connection's cookies first.
"""

from __future__ import annotations

import urllib.request
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy

from harvester.scraping.fetching.sites import is_public_suffix

__all__ = ["PublicSuffixCookiePolicy", "SourceCookieJars", "set_cookie_values"]

MAX_SOURCES = 1000  # jars kept per process; the least recently used source's goes first
MAX_COOKIES_PER_SOURCE = 3000  # past it a jar drops its expired cookies, then everything (a cookie flood)
MAX_COOKIES_PER_HOST = 50  # RFC 6265's floor for what a user agent keeps per domain; a site's later ones are dropped
MAX_COOKIE_HEADER_BYTES = 8192  # a Cookie header past this is cut (what many servers accept in one header line)


class PublicSuffixCookiePolicy(DefaultCookiePolicy):
    """The default policy, and no cookie for a public suffix: a ``Domain=com`` cookie set by shop.com would
    otherwise go to every .com site (RFC 6265 section 5.3, step 5)."""

    def set_ok_domain(self, cookie: Cookie, request: urllib.request.Request) -> bool:
        if cookie.domain_specified and is_public_suffix(cookie.domain):
            return False
        return bool(super().set_ok_domain(cookie, request))


class _SetCookieHeaders:
    """What :meth:`CookieJar.extract_cookies` reads of a response: its Set-Cookie values."""

    def __init__(self, values: list[str]) -> None:
        self.values = values

    def get_all(self, name: str, default: list[str]) -> list[str]:
        return list(self.values) if name.lower() == "set-cookie" else default


class _Response:
    def __init__(self, values: list[str]) -> None:
        self._headers = _SetCookieHeaders(values)

    def info(self) -> _SetCookieHeaders:
        return self._headers


def set_cookie_values(headers: Mapping[str, str]) -> list[str]:
    """Every ``Set-Cookie`` value of a response (aiohttp's and httpx's headers are multi-valued)."""
    for method in ("getall", "get_list"):  # aiohttp's CIMultiDict, httpx's Headers
        read = getattr(headers, method, None)
        if read is not None:
            return list(read("set-cookie", [])) if method == "getall" else list(read("set-cookie"))
    value = headers.get("set-cookie")
    return [value] if value else []


class SourceCookieJars:
    """A cookie jar per source (see the module docstring)."""

    def __init__(self, max_sources: int = MAX_SOURCES, max_cookies: int = MAX_COOKIES_PER_SOURCE,
                 max_per_host: int = MAX_COOKIES_PER_HOST, max_header_bytes: int = MAX_COOKIE_HEADER_BYTES) -> None:
        self.max_sources = max_sources
        self.max_cookies = max_cookies
        self.max_per_host = max_per_host
        self.max_header_bytes = max_header_bytes
        self._jars: OrderedDict[str, CookieJar] = OrderedDict()

    def jar(self, source: str) -> CookieJar:
        jar = self._jars.get(source)
        if jar is None:
            jar = self._jars[source] = CookieJar(PublicSuffixCookiePolicy())
            while len(self._jars) > self.max_sources:
                self._jars.popitem(last=False)
        self._jars.move_to_end(source)
        return jar

    def header(self, source: str, url: str, connection_cookies: Mapping[str, str] | None = None) -> str | None:
        """The ``Cookie`` header of a request of ``source`` to ``url``: the jar's cookies for it, and the
        connection's (given only when they may go to this URL), which win over the jar's of the same name."""
        request = urllib.request.Request(url)
        self.jar(source).add_cookie_header(request)
        jar_header = request.get_header("Cookie") or request.unredirected_hdrs.get("Cookie") or ""
        own = dict(connection_cookies or {})
        pairs = [f"{name}={value}" for name, value in own.items()]
        size = sum(len(pair) + 2 for pair in pairs)
        for pair in jar_header.split("; "):
            if not pair or pair.split("=", 1)[0] in own:
                continue
            if size + len(pair) + 2 > self.max_header_bytes:
                break  # the rest of the jar's cookies stay home: the header is as large as it may be
            pairs.append(pair)
            size += len(pair) + 2
        jar_pairs = pairs[len(own):]
        return "; ".join(jar_pairs + pairs[:len(own)]) or None

    def forget(self, jar: str) -> None:
        """Drop a whole jar: a retired session's cookies go with it (its successor starts with none)."""
        self._jars.pop(jar, None)

    def drop_host(self, source: str, host: str) -> int:
        """Forget the cookies of ``source`` that would go to ``host`` (its own and its parent domains'): a site
        that blocked us may have bound its verdict to them. The number dropped."""
        jar = self._jars.get(source)
        if jar is None:
            return 0
        host = host.lower().rstrip(".")
        domains = {cookie.domain: cookie.domain.lstrip(".").lower() for cookie in jar}
        doomed = [cookie for cookie in jar
                  if host == domains[cookie.domain] or host.endswith("." + domains[cookie.domain])]
        for cookie in doomed:
            jar.clear(cookie.domain, cookie.path, cookie.name)
        return len(doomed)

    def store(self, source: str, url: str, values: Iterable[str]) -> None:
        """Keep what a response to ``url`` set (refused domains, paths and public suffixes dropped)."""
        values = list(values)
        if not values:
            return
        jar = self.jar(source)
        jar.extract_cookies(_Response(values), urllib.request.Request(url))  # type: ignore[arg-type]  # duck: only .info()
        self._cap_hosts(jar)
        if len(jar) > self.max_cookies:
            jar.clear_expired_cookies()
            if len(jar) > self.max_cookies:
                jar.clear()

    def _cap_hosts(self, jar: CookieJar) -> None:
        """Each domain keeps its first ``max_per_host`` cookies (the jar keeps them in the order they came)."""
        for domain, paths in list(jar._cookies.items()):  # the standard jar's own store: domain -> path -> name
            cookies = [(path, name) for path, names in paths.items() for name in names]
            for path, name in cookies[self.max_per_host:]:
                jar.clear(domain, path, name)
