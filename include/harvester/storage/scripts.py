"""The contracts of the storage's Lua scripts (``lua/archived_digests.lua``, ``lua/archived_digests_sync.lua``),
called through :mod:`harvester.redis_scripts`.

The storage owns the archive's payload filter (:mod:`harvester.storage.archive_digests`), so it owns its scripts.
"""

from __future__ import annotations

from pathlib import Path

from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import ScriptContract, declare_script, optional_text

__all__ = ["ARCHIVED_DIGESTS", "ARCHIVED_DIGESTS_SYNC", "CONTRACTS", "LUA_DIRECTORY"]

LUA_DIRECTORY = Path(__file__).with_name("lua")

ARCHIVED_DIGESTS = declare_script(
    "archived_digests", "archived_digests archived_digests_log", "bits hashes digests mark_built keep_seconds",
    {"built": lambda value: bool(int(value)), "seen": optional_text}, directory=LUA_DIRECTORY, key_space=SourceKeys)

ARCHIVED_DIGESTS_SYNC = declare_script(
    "archived_digests_sync", "archived_digests archived_digests_log", "bits hashes digests cursor keep_seconds",
    {"built": lambda value: bool(int(value)), "kind": optional_text, "cursor": optional_text,
     "data": lambda value: bytes(value or b"")},  # binary: a bitmap, or digests' hex
    directory=LUA_DIRECTORY, key_space=SourceKeys)

CONTRACTS: dict[str, ScriptContract] = {script.name: script for script in (ARCHIVED_DIGESTS, ARCHIVED_DIGESTS_SYNC)}
