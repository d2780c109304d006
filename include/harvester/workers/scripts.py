"""The contract of the workers' Lua script (``lua/host_fetch.lua``), called through :mod:`harvester.redis_scripts`.

The workers own per-host politeness at fetch time (:class:`harvester.workers.host_rate.HostRateGate`),
so they own its script; its two keys are built from the host, so both are passed explicitly.
"""

from __future__ import annotations

from pathlib import Path

from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import ScriptContract, declare_script

__all__ = ["CONTRACTS", "HOST_FETCH", "LUA_DIRECTORY"]

LUA_DIRECTORY = Path(__file__).with_name("lua")

HOST_FETCH = declare_script(
    "host_fetch", "host_fetch_window host_fetch_active",
    "token per_minute window_seconds min_interval_seconds max_in_flight hold_seconds", {"wait_seconds": float},
    directory=LUA_DIRECTORY, key_space=SourceKeys, table=False,
    explicit_keys=("host_fetch_window", "host_fetch_active"))

CONTRACTS: dict[str, ScriptContract] = {HOST_FETCH.name: HOST_FETCH}
