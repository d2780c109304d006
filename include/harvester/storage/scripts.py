"""The contracts of the storage's Lua scripts (``lua/archived_digests.lua``), called through
:mod:`harvester.redis_scripts`.

The storage owns the archive's payload filter (:mod:`harvester.storage.archive_digests`), so it owns its script.
"""

from __future__ import annotations

from pathlib import Path

from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import ScriptContract, declare_script, optional_text

__all__ = ["ARCHIVED_DIGESTS", "CONTRACTS", "LUA_DIRECTORY"]

LUA_DIRECTORY = Path(__file__).with_name("lua")

ARCHIVED_DIGESTS = declare_script(
    "archived_digests", "archived_digests", "bits hashes digests mark_built",
    {"built": lambda value: bool(int(value)), "seen": optional_text}, directory=LUA_DIRECTORY, key_space=SourceKeys)

CONTRACTS: dict[str, ScriptContract] = {ARCHIVED_DIGESTS.name: ARCHIVED_DIGESTS}
