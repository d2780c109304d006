"""Fetching (HTTP and browser), extraction into typed records, link discovery and URL canonicalisation."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.errors import HostRateTimeout
    from harvester.scraping.addresses import SCREENING_TIMEOUT, TOO_MANY_HOSTS, AddressGuard, strip_userinfo
    from harvester.scraping.browser import CHROMIUM_ARGS, PageLoad, first_line, load_page, user_agent_and_headers
    from harvester.scraping.extraction import Extraction, extract_record
    from harvester.scraping.fetcher import Fetcher
    from harvester.scraping.guard_proxy import GuardProxy
    from harvester.scraping.links import discover_links
    from harvester.scraping.page import PageResult, process_page, record_url
    from harvester.scraping.page_fetcher import (
        SKIPPED_REASON,
        FetchedBatch,
        FetchPermit,
        FetchResult,
        HostLimits,
        PageFetcher,
    )
    from harvester.scraping.page_guard import ContextGuard, RequestCharger
    from harvester.scraping.readiness import Readiness
    from harvester.scraping.responses import DEFAULT_CLASSIFIER, RETRY_VERDICTS, ResponseClassifier, Verdict
    from harvester.scraping.robots import RobotsCache
    from harvester.scraping.sitemaps import SitemapDiscovery, SitemapFetcher
    from harvester.scraping.slot_browser import (
        OWNER_FLAG,
        SLOT_ARGS,
        SLOT_FLAG,
        LoadListener,
        PageCapture,
        Render,
        SlotBrowser,
        flag_value,
        kill_process_tree,
        render_page,
    )
    from harvester.urls import canonicalise_url

__all__ = [
    "CHROMIUM_ARGS", "DEFAULT_CLASSIFIER", "OWNER_FLAG", "RETRY_VERDICTS", "SCREENING_TIMEOUT", "SKIPPED_REASON",
    "SLOT_ARGS", "SLOT_FLAG", "TOO_MANY_HOSTS", "AddressGuard", "ContextGuard", "Extraction", "FetchPermit",
    "FetchResult", "FetchedBatch", "Fetcher", "GuardProxy", "HostLimits", "HostRateTimeout", "LoadListener",
    "PageCapture", "PageFetcher", "PageLoad", "PageResult", "Readiness", "Render", "RequestCharger",
    "ResponseClassifier", "RobotsCache", "SitemapDiscovery", "SitemapFetcher", "SlotBrowser", "Verdict",
    "canonicalise_url", "discover_links", "extract_record", "first_line", "flag_value", "kill_process_tree",
    "load_page", "process_page", "record_url", "render_page", "strip_userinfo", "user_agent_and_headers",
]
__getattr__, __dir__ = lazy_face(__name__)
