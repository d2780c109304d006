"""Fetching (HTTP and browser), extraction into typed records, link discovery and URL canonicalisation."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.errors import HostRateTimeout
    from harvester.scraping.browser import (
        CHROMIUM_ARGS,
        OWNER_FLAG,
        SLOT_ARGS,
        SLOT_FLAG,
        ContextGuard,
        GuardProxy,
        LoadListener,
        PageCapture,
        PageLoad,
        Readiness,
        Render,
        RequestCharger,
        SlotBrowser,
        UpstreamPool,
        UpstreamProxy,
        first_line,
        flag_value,
        kill_process_tree,
        load_page,
        render_page,
        user_agent_and_headers,
    )
    from harvester.scraping.discovery import SitemapDiscovery, SitemapFetcher, discover_links
    from harvester.scraping.extraction import Extraction, ExtractionTally, extract_record
    from harvester.scraping.fetching import (
        DEFAULT_CLASSIFIER,
        HOST_UNREACHABLE,
        NO_POOL_EXIT,
        RETRY_VERDICTS,
        SCREENING_TIMEOUT,
        SKIPPED_REASON,
        TOO_MANY_HOSTS,
        AddressGuard,
        Exchange,
        FetchedBatch,
        Fetcher,
        FetchPermit,
        FetchResult,
        HostLimits,
        PageFetcher,
        ResponseClassifier,
        RobotsCache,
        SessionExit,
        Verdict,
        decode_text,
        strip_userinfo,
    )
    from harvester.scraping.page import PageResult, process_page, record_url
    from harvester.urls import canonicalise_url

__all__ = [
    "CHROMIUM_ARGS", "DEFAULT_CLASSIFIER", "HOST_UNREACHABLE", "NO_POOL_EXIT", "OWNER_FLAG", "RETRY_VERDICTS",
    "SCREENING_TIMEOUT",
    "SKIPPED_REASON",
    "SLOT_ARGS", "SLOT_FLAG", "TOO_MANY_HOSTS", "AddressGuard", "ContextGuard", "Exchange", "Extraction",
    "ExtractionTally", "FetchPermit",
    "FetchResult", "FetchedBatch", "Fetcher", "GuardProxy", "HostLimits", "HostRateTimeout", "LoadListener",
    "PageCapture", "PageFetcher", "PageLoad", "PageResult", "Readiness", "Render", "RequestCharger",
    "ResponseClassifier", "RobotsCache", "SessionExit", "SitemapDiscovery", "SitemapFetcher", "SlotBrowser",
    "UpstreamPool", "UpstreamProxy", "Verdict",
    "canonicalise_url", "decode_text", "discover_links", "extract_record", "first_line", "flag_value",
    "kill_process_tree", "load_page", "process_page", "record_url", "render_page", "strip_userinfo",
    "user_agent_and_headers",
]
__getattr__, __dir__ = lazy_face(__name__)
