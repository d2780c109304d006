"""The contracts of the distributor's Lua scripts (``lua/*.lua``), called through :mod:`harvester.redis_scripts`.

Every script is prefixed with ``lua/common.lua`` (the server clock, leases, dead letters). KEYS are
:class:`~harvester.redis_keys.SourceKeys` properties, or passed explicitly (pause: the source's
``paused_until`` or its ``host_paused``); each file's header names the same KEYS, ARGV and reply
(``tests/test_lua_contracts.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import redis

from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import ScriptContract, Scripts, declare_script, text
from harvester.source_stats import STATS_FIELDS

__all__ = ["CONTRACTS", "LUA_DIRECTORY", "SCRIPT_NAMES", "distributor_scripts", "script_source"]

LUA_DIRECTORY = Path(__file__).with_name("lua")


def _contract(name: str, keys: str, arguments: str, reply: Mapping[str, Callable[[Any], Any]],
              table: bool = True, explicit_keys: Iterable[str] = ()) -> ScriptContract:
    return declare_script(name, keys, arguments, reply, directory=LUA_DIRECTORY, key_space=SourceKeys, table=table,
                          explicit_keys=explicit_keys)


_RESERVATION_KEYS = "active active_messages active_hosts host_active_counts counters"

CONTRACTS: dict[str, ScriptContract] = {contract.name: contract for contract in (
    _contract("promote_due", "delayed intake", "now limit", {"promoted": int, "next_due_seconds": float}),
    _contract(
        "admit",
        "intake active active_messages active_hosts host_active_counts host_paused window paused_until counters "
        "config dead_letters leases run_dead host_ready host_parked host_next_admission lent_places",
        "wanted publish_grace_seconds window_seconds now expected_source dead_letters_max host_queue_prefix park_limit "
        "beside_others",
        {"status": text, "wait_seconds": float, "pending": int, "malformed": int, "now": float, "active": int,
         "first_token": int, "messages...": text},
    ),
    _contract("mark_published", "active leases", "queued_lease_seconds now leases...", {"marked": int},
              table=False),
    _contract("start", "active leases counters", "lease_seconds now leases...", {"held...": text}),
    _contract("take_queued", "active active_messages leases counters", "wanted lease_seconds now",
              {"first_token": int, "messages...": text}),
    _contract("heartbeat", "active leases counters", "lease_seconds now leases...", {"held...": text}),
    _contract("release", f"{_RESERVATION_KEYS} leases worker_lost lent_places", "leases...", {"released": int},
              table=False),
    _contract(
        "fail",
        f"{_RESERVATION_KEYS} config delayed dead_letters run_dead host_paused leases worker_lost lent_places",
        "task_id next_attempt retry_message original_message reason delay_seconds now host pause_host_seconds "
        "token dead_letters_max host_pause_max_seconds",
        {"outcome": text, "due": float},
    ),
    _contract(
        "reap",
        f"{_RESERVATION_KEYS} config intake dead_letters run_dead delayed leases worker_lost lent_places",
        "now limit dead_letters_max",
        {"reaped": int, "returned": int, "dead_entries...": text},
    ),
    _contract(
        "worker_lost",
        f"{_RESERVATION_KEYS} config intake dead_letters run_dead delayed leases worker_lost lent_places",
        "now delay_seconds kills_allowed dead_letters_max leases...",
        {"retried": int, "returned": int, "dead_entries...": text},
    ),
    _contract(
        "continue_chain",
        f"{_RESERVATION_KEYS} config host_paused window paused_until leases worker_lost lent_places",
        "parent_id parent_token child_id child_message lease_seconds window_seconds now",
        {"status": text, "token": text},
    ),
    _contract("return_lost", f"{_RESERVATION_KEYS} intake leases lent_places", "leases...", {"returned": int},
              table=False),
    _contract("hand_back", f"{_RESERVATION_KEYS} intake leases worker_lost lent_places", "leases...",
              {"handed_back": int}, table=False),
    _contract("lend_places", "active leases lent_places config", "now leases...",
              {"lends": bool, "lent_total": int, "lent...": text}),
    _contract("acquire_fetch", "window config counters leases active", "window_seconds count now leases...",
              {"granted": int, "wait_seconds": float, "lost...": text}),
    _contract("live_tasks", "intake delayed active active_messages host_ready", "run_id page host_queue_prefix",
              {"task_ids...": text}),
    _contract("pause", "paused", "seconds now host", {"paused_until": float}, table=False,
              explicit_keys=("paused",)),
    # the reply is a SourceStats, field for field and in order
    _contract("stats", "intake delayed active window counters dead_letters host_parked", "window_seconds",
              dict.fromkeys(STATS_FIELDS, int)),
    _contract("requeue_dead", "dead_letters intake run_dead", "limit", {"requeued": int, "kept": int}),
)}
SCRIPT_NAMES = tuple(CONTRACTS)


def distributor_scripts(client: redis.Redis) -> Scripts:
    """The distributor's scripts on ``client``."""
    return Scripts(client, CONTRACTS)


def script_source(name: str) -> str:
    """The full text of one distributor script: the shared helpers, then the script itself."""
    return CONTRACTS[name].source
