"""Browser page slots (DESIGN.md section 5): allocation, preparation, idle closing, the slot state machine.
"""

from harvester import lazy_exports

_EXPORTS = {
    "AllocationPolicy": "allocation",
    "BrowserHost": "host",
    "PageSlotManager": "manager",
    "host_slot": "host",
    "proxy_environment_variable": "proxies",
    "BrowserPageFetcher": "host",
    "CountryTasks": "allocation",
    "PageSlotHandoff": "handoff",
    "SlotRecord": "registry",
    "SlotRegistry": "registry",
    "last_decision": "manager",
    "proxy_bytes_by_country": "proxies",
    "allocate_page_slots": "allocation",
    "browser_host": "host",
    "page_slots_to_start": "allocation",
    "tasks_by_country_from": "allocation",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
