"""Browser page slots (DESIGN.md section 5): allocation, preparation, idle closing, the slot state machine.
"""

from harvester import lazy_exports

_EXPORTS = {
    "AllocationPolicy": "allocation",
    "BrowserHost": "browser_host",
    "PageSlotManager": "manager",
    "host_slot": "host",
    "proxy_environment_variable": "proxies",
    "BrowserPageFetcher": "browser_host",
    "PageSlotHost": "host",
    "SettledTask": "pipeline",
    "SlotPipeline": "pipeline",
    "CountryTasks": "allocation",
    "allocate_page_slots": "allocation",
    "browser_host": "browser_host",
    "page_slot_queues": "browser_host",
    "page_slots_to_start": "allocation",
    "tasks_by_country_from": "allocation",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
