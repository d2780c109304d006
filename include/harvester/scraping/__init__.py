"""Fetching (HTTP and browser), extraction into typed records, link discovery and URL canonicalisation.
"""

from harvester import lazy_exports

_EXPORTS = {
    "AddressGuard": "addresses",
    "CHROMIUM_ARGS": "browser",
    "ContextGuard": "page_guard",
    "GuardProxy": "guard_proxy",
    "LoadListener": "slot_browser",
    "OWNER_FLAG": "slot_browser",
    "PageCapture": "slot_browser",
    "Readiness": "readiness",
    "Render": "slot_browser",
    "RequestCharger": "page_guard",
    "SLOT_FLAG": "slot_browser",
    "SlotBrowser": "slot_browser",
    "flag_value": "slot_browser",
    "kill_process_tree": "slot_browser",
    "HostLimits": "page_fetcher",
    "HostRateTimeout": "page_fetcher",
    "RobotsCache": "robots",
    "strip_userinfo": "addresses",
    "DEFAULT_CLASSIFIER": "responses",
    "FetchedBatch": "page_fetcher",
    "FetchPermit": "page_fetcher",
    "SKIPPED_REASON": "page_fetcher",
    "FetchResult": "fetcher",
    "Fetcher": "fetcher",
    "PageLoad": "browser",
    "PageFetcher": "page_fetcher",
    "PageResult": "page",
    "RETRY_VERDICTS": "responses",
    "ResponseClassifier": "responses",
    "Verdict": "responses",
    "canonicalise_url": "links",
    "discover_links": "links",
    "extract_record": "extraction",
    "first_line": "browser",
    "load_page": "browser",
    "process_page": "page",
    "record_url": "page",
    "render_page": "slot_browser",
    "user_agent_and_headers": "browser",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
