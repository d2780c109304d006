"""The browser: one page load, the slot's long-lived browser (a context per source visit), readiness, and
the guards every browser request passes (credentials bound to their origins, the address rules through a
guarding proxy).

It may use fetching's address rules and response contract; it imports neither extraction nor discovery.
"""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.scraping.browser.guard_proxy import PROXY_ERROR_HEADER, GuardProxy, UpstreamPool, UpstreamProxy
    from harvester.scraping.browser.page_guard import ContextGuard, RequestCharger
    from harvester.scraping.browser.page_load import (
        CHROMIUM_ARGS,
        PageLoad,
        first_line,
        load_page,
        user_agent_and_headers,
    )
    from harvester.scraping.browser.processes import OWNER_FLAG, SLOT_FLAG, flag_value, kill_process_tree
    from harvester.scraping.browser.readiness import Readiness
    from harvester.scraping.browser.slot_browser import (
        SLOT_ARGS,
        LoadListener,
        PageCapture,
        Render,
        SlotBrowser,
        render_page,
    )

__all__ = [
    "CHROMIUM_ARGS", "OWNER_FLAG", "PROXY_ERROR_HEADER", "SLOT_ARGS", "SLOT_FLAG", "ContextGuard", "GuardProxy",
    "LoadListener", "PageCapture", "PageLoad", "Readiness", "Render", "RequestCharger", "SlotBrowser", "UpstreamPool",
    "UpstreamProxy", "first_line", "flag_value", "kill_process_tree", "load_page", "render_page",
    "user_agent_and_headers",
]
__getattr__, __dir__ = lazy_face(__name__)
