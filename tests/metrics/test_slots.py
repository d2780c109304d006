"""Page slots in the metrics and the page's API, from the slot records the page-slot component writes."""

from __future__ import annotations

import json

import pytest
from harvester.metrics.collector import metrics_registry
from harvester.pageslots.manager import last_decision
from harvester.pageslots.proxies import proxy_bytes_by_country
from harvester.pageslots.registry import SlotRegistry, SlotState
from harvester.redis_keys import PageSlotKeys

from tests.metrics.helpers import scrape, value

pytestmark = pytest.mark.integration
KEYS = PageSlotKeys()


def test_slots_by_country_and_state_and_proxy_bytes(harvester_settings, redis_client) -> None:
    registry = metrics_registry(redis_client, harvester_settings)
    slots = SlotRegistry(redis_client)
    singapore = slots.create("SG", 3)
    slots.create("MY", 1)
    slots.transition(singapore[0], SlotState.PREPARING_PAGE)
    samples = scrape(registry)
    assert value(samples, "harvester_page_slots", country="SG", state="NO_PAGE") == 2
    assert value(samples, "harvester_page_slots", country="SG", state="PREPARING_PAGE") == 1
    assert value(samples, "harvester_page_slots", country="MY", state="NO_PAGE") == 1

    slots.transition(singapore[0], SlotState.PAGE_READY)
    redis_client.hincrby(KEYS.proxy_bytes, "country:SG", 4096)  # as a slot host counts what its proxy carried
    redis_client.hincrby(KEYS.proxy_bytes, "source:shop_sg", 4096)
    redis_client.set(KEYS.last_decision, json.dumps({"slots": {"SG": 3, "MY": 1}, "max_page_slots": 4}))
    samples = scrape(registry)
    assert value(samples, "harvester_page_slots", country="SG", state="PAGE_READY") == 1
    assert value(samples, "harvester_page_slots", country="SG", state="PREPARING_PAGE") == 0
    assert value(samples, "harvester_proxy_bytes_total", country="SG") == 4096
    assert proxy_bytes_by_country(redis_client) == {"SG": 4096}
    assert last_decision(redis_client)["slots"] == {"SG": 3, "MY": 1}
    assert sorted((record.country, record.state) for record in slots.slots()) == [
        ("MY", "NO_PAGE"), ("SG", "NO_PAGE"), ("SG", "NO_PAGE"), ("SG", "PAGE_READY")]
