"""The contracts of the page-slot Lua scripts (``lua/*.lua``), called through :mod:`harvester.redis_scripts`.

Every script is prefixed with ``lua/common.lua`` (server time, the legal transitions, landing in NO_PAGE).
KEYS are :class:`~harvester.redis_keys.PageSlotKeys` properties, or passed explicitly when built from a slot
id or a country; each file's header names the same KEYS, ARGV and reply (``tests/test_lua_contracts.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import redis

from harvester.redis_keys import PageSlotKeys
from harvester.redis_scripts import ScriptContract, Scripts, declare_script, optional_text, text

__all__ = ["CONTRACTS", "LUA_DIRECTORY", "page_slot_scripts"]

LUA_DIRECTORY = Path(__file__).with_name("lua")


def _contract(name: str, keys: str, arguments: str, reply: Mapping[str, Callable[[Any], Any]],
              table: bool = True, explicit_keys: Iterable[str] = ()) -> ScriptContract:
    return declare_script(name, keys, arguments, reply, directory=LUA_DIRECTORY, key_space=PageSlotKeys, table=table,
                          explicit_keys=explicit_keys)


CONTRACTS: dict[str, ScriptContract] = {contract.name: contract for contract in (
    _contract("slot_create", "all_slots slot_sequence country_slots", "country count slot_prefix",
              {"slot_ids...": text}, explicit_keys=("country_slots",)),
    _contract("slot_transition", "slot all_slots",
              "slot_id target owner country_prefix required min_idle_seconds reason fields...",
              {"status": text, "previous": optional_text, "outcome": optional_text}, explicit_keys=("slot",)),
    _contract("slot_claim", "slot", "owner worker process_id stale_after_seconds",
              {"status": text, "state": optional_text, "country": optional_text}, explicit_keys=("slot",)),
    _contract("slot_heartbeat", "slot", "owner browser_pid",
              {"status": text, "state": optional_text, "country": optional_text, "retire": optional_text,
               "next_country": optional_text}, explicit_keys=("slot",)),
    _contract("slot_begin_task", "slot browser_tasks recent_task_states", "owner message member",
              {"status": text, "state": optional_text}, explicit_keys=("slot", "browser_tasks")),
    _contract("slot_reassign", "slot all_slots", "slot_id new_country country_prefix",
              {"status": text, "state": optional_text}, explicit_keys=("slot",)),
    _contract("slot_reset_stale", "all_slots", "stale_after_seconds slot_prefix country_prefix unclaimed_after_seconds",
              {"reset_slots...": optional_text}),
    _contract("hosts_advertise", "hosts host_capacity", "host capacity ttl_seconds",
              {"live_capacity": int, "live_hosts": int}),
    _contract("proxy_choose", "proxy_health proxy_bans", "host proxies...", {"chosen...": text},
              explicit_keys=("proxy_health", "proxy_bans")),
    _contract("proxy_ban", "proxy_health proxy_bans", "proxy host ban_seconds proxies...",
              {"banned_until": float, "welcome": int}, explicit_keys=("proxy_health", "proxy_bans")),
    _contract("proxy_report", "proxy_health",
              "proxy outcome failures_allowed base_seconds max_seconds jitter",
              {"state": text, "failures": int, "out_for": float}, explicit_keys=("proxy_health",)),
    _contract("proxy_tier_choose", "proxy_tiers", "host tiers keep_seconds", {"tier": int, "down_in": float},
              explicit_keys=("proxy_tiers",)),
    _contract("proxy_tier_block", "proxy_tiers", "host tier tiers quiet_seconds max_doublings keep_seconds",
              {"tier": int, "quiet_for": float, "strikes": int}, explicit_keys=("proxy_tiers",)),
    _contract("track_browser_tasks", "recent_tasks recent_task_states", "sample_size state entries...",
              {"recorded": int}, table=False),
)}


def page_slot_scripts(client: redis.Redis) -> Scripts:
    """The page-slot scripts registered on ``client``."""
    return Scripts(client, CONTRACTS)
