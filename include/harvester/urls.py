"""The one canonical form of a URL, used by discovery, records, the duplicate-URL checker and the planner,
so one page has one key everywhere.

It is w3lib's ``canonicalize_url`` (percent-escape case, dot segments, IDNA hosts, IPv6 forms, a
sorted query; escapes that are not UTF-8, such as ``caf%E9``, are kept as the site wrote them) plus
Harvester's rules: only http(s); no userinfo (credentials never travel in a stored URL); no default
port; no trailing dot on the host; no fragment; no tracking parameters; no session ids
(:class:`SessionIds`: ``jsessionid``, ``PHPSESSID`` and the like in the query or as a ``;name=value`` path
parameter, ``sid`` and ``sessionid`` when their value looks like a token), so one item linked from two
renders of a listing with two sessions is one key. A source may drop more names or keep some
(``session_ids`` in its YAML).
Beside it, the key web archives sort and look URLs up by (:func:`surt_key`, the archive's CDXJ and `try --warc`).
A leaf module: producer, scraping and storage all import it, and it imports none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote_plus, urljoin, urlsplit, urlunsplit

from w3lib.url import canonicalize_url

TRACKING_PARAMETERS = frozenset({
    "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid", "igshid", "twclid",
    "ttclid", "li_fat_id", "mc_cid", "mc_eid", "_ga", "_gl", "_hsenc", "_hsmi", "mkt_tok", "wt.mc_id",
    "oly_anon_id", "oly_enc_id", "vero_id", "spm",
})
TRACKING_PREFIXES = ("utm_", "pk_", "hsa_")
DEFAULT_PORTS = {"http": 80, "https": 443}
# names that only ever carry a session (any value); ASP's cookie-less session names end in random letters
SESSION_PARAMETERS = frozenset({"jsessionid", "phpsessid", "aspsessionid", "cfid", "cftoken", "zenid", "oscsid",
                                "sessid", "session_id", "sessionid", "sid", "s_id"})
ALWAYS_SESSION_PARAMETERS = frozenset({"jsessionid", "phpsessid", "aspsessionid", "zenid", "oscsid"})
SESSION_PREFIXES = ("aspsessionid",)
# a value that looks like a session token: 16 or more letters, digits, '-' or '_' with at least one digit
# (``sid=de`` is a language, ``sessionid=12`` a count; ``sid=9f1c2e77a04b4d3e`` is a session)
_TOKEN = re.compile(r"(?=[^0-9]*[0-9])[A-Za-z0-9_.-]{16,}")
_PATH_PARAMETER = re.compile(r";([A-Za-z_][\w.-]*)=([^/?#;]*)")
# URLs that are canonical already (lower-case host, no default port, a plain path without dot
# segments, no query, no fragment): most input and discovered URLs. They skip w3lib, which costs
# about 10 us a URL; the planner reads 200,000 input URLs a run.
_ALREADY_CANONICAL = re.compile(r"(https?)://[a-z0-9-]+(?:\.[a-z0-9-]+)*(?::([1-9][0-9]{0,4}))?((?:/[A-Za-z0-9._~-]*)*)")
# A page's origin written plainly, and a link that is a plain path from the root ("/product/12", no dot segment,
# query or scheme): joined to its page by concatenation, which is what urljoin gives for them. urljoin costs
# about 30 us a link, and an API page of 50 items has as many links as items.
_PLAIN_ORIGIN = re.compile(r"https?://[a-z0-9-]+(?:\.[a-z0-9-]+)*(?::[0-9]{1,5})?(?=[/?#]|$)")
_PLAIN_ROOT_PATH = re.compile(r"(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+/?")


@dataclass(frozen=True)
class SessionIds:
    """Which query and path parameters are session ids and leave the canonical URL: the default names
    (:data:`SESSION_PARAMETERS`: the unambiguous ones whatever their value, ``sid``-like ones when the value
    looks like a token), plus a source's ``drop`` (whatever their value), minus its ``keep``."""

    drop: frozenset[str] = frozenset()
    keep: frozenset[str] = frozenset()

    def is_session_id(self, name: str, value: str) -> bool:
        lowered = name.lower()
        if lowered in self.keep:
            return False
        if lowered in self.drop or lowered in ALWAYS_SESSION_PARAMETERS or lowered.startswith(SESSION_PREFIXES):
            return True
        return lowered in SESSION_PARAMETERS and _TOKEN.fullmatch(value) is not None


DEFAULT_SESSION_IDS = SessionIds()


def without_session_path_parameters(url: str, session_ids: SessionIds = DEFAULT_SESSION_IDS) -> str:
    """``url`` without ``;jsessionid=…``-style path parameters (Java servlets write the session there)."""
    if ";" not in url:
        return url
    head, mark, tail = url.partition("?") if "?" in url else url.partition("#")
    head = _PATH_PARAMETER.sub(lambda match: "" if session_ids.is_session_id(*match.groups()) else match.group(),
                               head)
    return f"{head}{mark}{tail}"


def is_tracking_parameter(name: str) -> bool:
    lowered = name.lower()
    return lowered in TRACKING_PARAMETERS or lowered.startswith(TRACKING_PREFIXES)


def canonicalise_url(url: str | None, base: str | None = None,
                     session_ids: SessionIds = DEFAULT_SESSION_IDS) -> str | None:
    """The canonical form of a link (resolved against ``base``), or None when it is not an http(s) URL
    with a host (``javascript:``, ``mailto:``, ``file:``, ``data:``, malformed). ``session_ids``: the
    source's rules of which parameters are session ids (the defaults otherwise)."""
    url = (url or "").strip()
    if not url:
        return None
    if base is not None:  # a relative link joined first, so links such as "/product/12" take the fast path too
        try:
            url = join(base, url)
        except ValueError:
            return None
    if (match := _ALREADY_CANONICAL.fullmatch(url)) and _plain(*match.groups()):
        return url if match.group(3) else f"{url}/"
    return _canonicalise(url, None, session_ids)


def join(base: str, url: str) -> str:
    """``urljoin(base, url)``, with its answer for the commonest links (an absolute URL in canonical form, a plain
    path from the root of a plainly written page) given without it."""
    if _ALREADY_CANONICAL.fullmatch(url):
        return url
    if _PLAIN_ROOT_PATH.fullmatch(url) and "/." not in url and (origin := _plain_origin(base)) is not None:
        return origin + url
    return urljoin(base, url)


@lru_cache(maxsize=256)
def _plain_origin(base: str) -> str | None:
    """The scheme, host and port of a page written plainly (a page's items share it: looked up once)."""
    match = _PLAIN_ORIGIN.match(base)
    return match.group() if match else None


def _dropped(pair: str, session_ids: SessionIds) -> bool:
    """A query parameter that is no part of the page's identity: a tracking parameter or a session id."""
    name, _, value = pair.partition("=")
    name = unquote_plus(name)
    return is_tracking_parameter(name) or session_ids.is_session_id(name, unquote_plus(value))


def _plain(scheme: str, port: str | None, path: str) -> bool:
    """The rest of the fast path's test: a port that is kept as written, no dot or empty segments."""
    if port is not None and (int(port) > 65_535 or int(port) == DEFAULT_PORTS[scheme]):
        return False
    return "//" not in path and "/./" not in f"{path}/" and "/../" not in f"{path}/"


def _canonicalise(url: str, base: str | None, session_ids: SessionIds = DEFAULT_SESSION_IDS) -> str | None:
    try:
        if base is not None:
            url = urljoin(base, url)
        url = without_session_path_parameters(url, session_ids)
        if urlsplit(url).scheme.lower() not in DEFAULT_PORTS:
            return None
        parts = urlsplit(canonicalize_url(url))
        host = parts.hostname
        port = parts.port
    except ValueError:  # a bad port, an unclosed IPv6 bracket, a host IDNA cannot encode
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not host:
        return None
    host = host.rstrip(".")
    if not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    query = "&".join(pair for pair in parts.query.split("&") if pair and not _dropped(pair, session_ids))
    return urlunsplit((scheme, netloc, parts.path or "/", query, ""))


def surt_key(url: str) -> str:
    """The key web archives sort and look a URL up by: the Internet Archive's Sort-friendly URI Reordering
    Transform, from the ``surt`` package that pywb and cdxj-indexer use (``com,example)/shop?a=1&b=2``). Why not our
    own: their key is a canonical form as well as a reordering (``www2.`` dropped, query parameters sorted, session
    ids cut, escapes decoded, the host in IDNA), and a key spelled otherwise is a page pywb cannot find. A URL the
    package cannot read (a port past 65535) is its own key, as cdxj-indexer keys it."""
    import surt

    try:
        return surt.surt(url)
    except (ValueError, UnicodeError):
        return url
