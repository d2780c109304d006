"""The contracts of the workers' Lua scripts (``lua/host_fetch.lua``, ``lua/host_throttle.lua``,
``lua/host_breaker.lua``), called through
:mod:`harvester.redis_scripts`.

The workers own per-host politeness at fetch time (:class:`harvester.workers.host_rate.HostRateGate`),
so they own its script; its two keys are built from the host, so both are passed explicitly.
"""

from __future__ import annotations

from pathlib import Path

from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import ScriptContract, declare_script, text

__all__ = ["CONTRACTS", "HOST_BREAKER", "HOST_FETCH", "HOST_THROTTLE", "LUA_DIRECTORY"]

LUA_DIRECTORY = Path(__file__).with_name("lua")

HOST_FETCH = declare_script(
    "host_fetch", "host_fetch_window host_fetch_active",
    "token per_minute window_seconds min_interval_seconds max_in_flight hold_seconds", {"wait_seconds": float},
    directory=LUA_DIRECTORY, key_space=SourceKeys, table=False,
    explicit_keys=("host_fetch_window", "host_fetch_active"))

HOST_THROTTLE = declare_script(
    "host_throttle", "host_throttles host_blocks window",
    "host blocked clean ceiling_per_minute floor_per_minute raise_factor window_seconds pause_after "
    "rate_window_seconds recovery_seconds",
    {"rate_per_minute": float, "blocks_in_window": int, "pause": lambda value: bool(int(value))},
    directory=LUA_DIRECTORY, key_space=SourceKeys, explicit_keys=("host_blocks",))

HOST_BREAKER = declare_script(
    "host_breaker", "host_breakers", "host unreachable reached threshold pause_seconds max_pause_seconds keep_seconds",
    {"state": text, "open_seconds": float, "openings": int}, directory=LUA_DIRECTORY, key_space=SourceKeys)

CONTRACTS: dict[str, ScriptContract] = {HOST_FETCH.name: HOST_FETCH, HOST_THROTTLE.name: HOST_THROTTLE,
                                        HOST_BREAKER.name: HOST_BREAKER}
