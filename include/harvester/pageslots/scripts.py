"""The Lua scripts of the page slots, read from ``lua/*.lua`` and registered once per Redis client.

Every script is prefixed with ``lua/common.lua`` (server time, the legal transitions, landing in NO_PAGE).
Each file starts with a header naming its KEYS, ARGV and reply; redis-py's :class:`Script` sends EVALSHA
and loads the script again when Redis forgot it (after a restart).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import redis
from redis.commands.core import Script

LUA_DIRECTORY = Path(__file__).with_name("lua")
SCRIPT_NAMES = ("slot_create", "slot_transition", "slot_claim", "slot_heartbeat", "slot_begin_task",
                "slot_reassign", "slot_reset_stale", "hosts_advertise")


@cache
def script_source(name: str) -> str:
    common = (LUA_DIRECTORY / "common.lua").read_text()
    return f"{common}\n{(LUA_DIRECTORY / f'{name}.lua').read_text()}"


class PageSlotScripts:
    """The registered page-slot scripts of one Redis client, by name."""

    def __init__(self, client: redis.Redis) -> None:
        self.by_name: dict[str, Script] = {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}

    def __getitem__(self, name: str) -> Script:
        return self.by_name[name]
