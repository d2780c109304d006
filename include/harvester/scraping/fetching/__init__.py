"""Fetching over HTTP: transports, bodies within their caps, the charset of what was fetched (pages, feeds,
sitemaps and robots.txt alike), responses classified, robots.txt, the address rules (SSRF defences), sites by
the Public Suffix List, a source's cookies, sessions (an exit of a proxy pool and a cookie jar, retired on a
block), and the contract HTTP and the browser both offer (``page_fetcher``).

It imports no other part of :mod:`harvester.scraping`: extraction, discovery and the browser build on it.
"""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.scraping.fetching.addresses import (
        SCREENING_TIMEOUT,
        TOO_MANY_HOSTS,
        AddressGuard,
        IPAddress,
        name_refusal,
        strip_userinfo,
    )
    from harvester.scraping.fetching.bodies import WireCap, ZlibDecoder, decoder_for
    from harvester.scraping.fetching.charsets import DecodedText, StreamDecoder, decode_document, decode_text
    from harvester.scraping.fetching.fetcher import Fetcher
    from harvester.scraping.fetching.outgoing import KeptCredentials, credential_headers
    from harvester.scraping.fetching.page_fetcher import (
        SKIPPED_REASON,
        Exchange,
        FetchedBatch,
        FetchPermit,
        FetchResult,
        HostLimits,
        PageFetcher,
    )
    from harvester.scraping.fetching.responses import DEFAULT_CLASSIFIER, RETRY_VERDICTS, ResponseClassifier, Verdict
    from harvester.scraping.fetching.robots import RobotsCache
    from harvester.scraping.fetching.sessions import (
        NO_POOL_EXIT,
        RETIRING_STATUSES,
        ExitPool,
        Session,
        SessionExit,
        Sessions,
        host_name,
    )
    from harvester.scraping.fetching.sites import Origin, credential_origins, origin_of_url, same_site
    from harvester.scraping.fetching.transports import HOST_UNREACHABLE, PROXY_ERROR_HEADER, REFUSED_HEADER

__all__ = [
    "DEFAULT_CLASSIFIER",
    "HOST_UNREACHABLE",
    "NO_POOL_EXIT",
    "PROXY_ERROR_HEADER",
    "REFUSED_HEADER",
    "RETIRING_STATUSES",
    "RETRY_VERDICTS",
    "SCREENING_TIMEOUT",
    "SKIPPED_REASON",
    "TOO_MANY_HOSTS",
    "AddressGuard",
    "DecodedText",
    "Exchange",
    "ExitPool",
    "FetchPermit",
    "FetchResult",
    "FetchedBatch",
    "Fetcher",
    "HostLimits",
    "IPAddress",
    "KeptCredentials",
    "Origin",
    "PageFetcher",
    "ResponseClassifier",
    "RobotsCache",
    "Session",
    "SessionExit",
    "Sessions",
    "StreamDecoder",
    "Verdict",
    "WireCap",
    "ZlibDecoder",
    "credential_headers",
    "credential_origins",
    "decode_document",
    "decode_text",
    "decoder_for",
    "host_name",
    "name_refusal",
    "origin_of_url",
    "same_site",
    "strip_userinfo",
]
__getattr__, __dir__ = lazy_face(__name__)
