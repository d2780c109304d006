"""Browser page slots (DESIGN.md section 5): allocation, preparation, idle closing, the slot state machine."""

from typing import TYPE_CHECKING

from harvester.lazy import lazy_face

if TYPE_CHECKING:  # loaded on first use (see harvester.lazy): the imports a reader sees
    from harvester.pageslots.allocation import (
        AllocationPolicy,
        CountryTasks,
        allocate_page_slots,
        page_slots_to_start,
        tasks_by_country_from,
    )
    from harvester.pageslots.browser_host import BrowserHost, BrowserPageFetcher, browser_host
    from harvester.pageslots.handoff import PageSlotHandoff
    from harvester.pageslots.host import PageSlotHost, host_slot
    from harvester.pageslots.hosting import connect_slot_hosting
    from harvester.pageslots.manager import PageSlotManager, last_decision
    from harvester.pageslots.pipeline import SettledTask, SlotPipeline
    from harvester.pageslots.proxies import proxy_bytes_by_country, proxy_environment_variable
    from harvester.pageslots.proxy_pool import CountryExits, ProxyHealth, proxy_figures, proxy_pool
    from harvester.pageslots.registry import HostCapacity, SlotHosts, SlotRecord, SlotRegistry

__all__ = [
    "AllocationPolicy", "BrowserHost", "BrowserPageFetcher", "CountryExits", "CountryTasks", "HostCapacity",
    "PageSlotHandoff", "PageSlotHost", "PageSlotManager", "ProxyHealth", "SettledTask", "SlotHosts", "SlotPipeline",
    "SlotRecord", "SlotRegistry", "allocate_page_slots", "browser_host", "connect_slot_hosting", "host_slot",
    "last_decision", "page_slots_to_start", "proxy_bytes_by_country", "proxy_environment_variable", "proxy_figures",
    "proxy_pool",
    "tasks_by_country_from",
]
__getattr__, __dir__ = lazy_face(__name__)
