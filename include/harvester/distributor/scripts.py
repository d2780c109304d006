"""The Lua scripts of the rate-limit store, their contracts, and the one way to call them.

Each script in ``lua/*.lua`` has a :class:`ScriptContract` here: its KEYS (named as the
:class:`~harvester.redis_keys.SourceKeys` properties they are), its ARGV and its reply fields, in order.
The script's header comment names the same things and ``tests/distributor/test_units.py`` checks they
agree, so a KEYS list is never copied by hand and a reply is never read by index.

Every script is prefixed with ``lua/common.lua`` (shared helpers). Calls go through :meth:`Scripts.run_pipeline`,
which sends plain EVALSHA in one non-transactional pipeline and reloads the scripts once if Redis forgot them
(after a restart), so a pipelined call stays one round trip instead of redis-py's extra SCRIPT EXISTS.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from harvester.redis_keys import SourceKeys

LUA_DIRECTORY = Path(__file__).with_name("lua")
VARIADIC = "..."  # a last ARGV or reply name ending in this takes the rest of the list


def text(value: bytes | str) -> str:
    """A Redis bulk string as str (clients built without decode_responses return bytes)."""
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class ScriptContract:
    """What one Lua script takes and gives back, by name and in order (its header comment says the same).

    ``keys`` are :class:`SourceKeys` property names, except those in ``explicit_keys``, which the caller
    passes itself (pause: the source's ``paused_until`` or its ``host_paused``). ``arguments`` are ARGV
    names. ``reply`` maps each reply field to the function that decodes it; a script returning one value
    has ``table=False`` and one field. A last name ending in ``...`` takes the remaining items as a list.
    """

    name: str
    keys: tuple[str, ...]
    arguments: tuple[str, ...]
    reply: Mapping[str, Callable[[Any], Any]]
    table: bool = True
    explicit_keys: frozenset[str] = frozenset()
    reply_type: type = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [name.removesuffix(VARIADIC) for name in self.reply]
        object.__setattr__(self, "reply_type", namedtuple(f"{self.name.title().replace('_', '')}Reply", names))

    def key_names(self, source: str, explicit: Mapping[str, str] | None = None) -> list[str]:
        """The KEYS of a call on ``source``: each property of its SourceKeys, or the explicit key given."""
        explicit = dict(explicit or {})
        if set(explicit) != self.explicit_keys:
            raise TypeError(f"{self.name}: explicit keys {sorted(explicit)} given, {sorted(self.explicit_keys)} "
                            "expected")
        source_keys = SourceKeys(source)
        return [explicit[name] if name in explicit else getattr(source_keys, name) for name in self.keys]

    def argument_values(self, arguments: Mapping[str, Any]) -> list[Any]:
        """ARGV in the script's order from arguments given by name; every name must be given, no other."""
        expected = {name.removesuffix(VARIADIC) for name in self.arguments}
        if set(arguments) != expected:
            raise TypeError(f"{self.name}: arguments {sorted(arguments)} given, {sorted(expected)} expected")
        values: list[Any] = []
        for name in self.arguments:
            if name.endswith(VARIADIC):
                values.extend(arguments[name.removesuffix(VARIADIC)])
            else:
                values.append(arguments[name])
        return values

    def decode(self, raw: Any) -> Any:
        """The reply as a named tuple of decoded fields (``reply.pending``, not ``reply[2]``)."""
        items = list(raw) if self.table else [raw]
        decoded: list[Any] = []
        for position, (name, decoder) in enumerate(self.reply.items()):
            if name.endswith(VARIADIC):
                decoded.append([decoder(item) for item in items[position:]])
            else:
                decoded.append(decoder(items[position]))
        return self.reply_type(*decoded)


def _contract(name: str, keys: str, arguments: str, reply: Mapping[str, Callable[[Any], Any]],
              table: bool = True, explicit_keys: Iterable[str] = ()) -> ScriptContract:
    return ScriptContract(name, tuple(keys.split()), tuple(arguments.split()), reply, table, frozenset(explicit_keys))


_STATS_FIELDS = ("pending", "delayed", "active", "admitted_in_window", "done", "failed", "dead", "admitted",
                 "dead_letters")

CONTRACTS: dict[str, ScriptContract] = {contract.name: contract for contract in (
    _contract(
        "admit",
        "intake delayed active active_messages active_hosts host_active_counts host_paused window paused_until "
        "counters config dead_letters",
        "wanted lease_seconds window_seconds now expected_source",
        {"status": text, "wait_seconds": float, "pending": int, "malformed": int, "now": float, "active": int,
         "messages...": text},
    ),
    _contract("heartbeat", "active", "lease_seconds now task_ids...", {"extended": int}, table=False),
    _contract("release", "active active_messages active_hosts host_active_counts counters", "task_ids...",
              {"released": int}, table=False),
    _contract(
        "fail",
        "active active_messages active_hosts host_active_counts counters config delayed dead_letters run_dead "
        "host_paused",
        "task_id next_attempt retry_message original_message reason delay_seconds now host pause_host_seconds",
        {"outcome": text, "due": float},
    ),
    _contract(
        "reap",
        "active active_messages active_hosts host_active_counts counters config intake dead_letters run_dead "
        "delayed",
        "now limit",
        {"reaped": int, "dead_entries...": text},
    ),
    _contract("pause", "paused", "seconds now host", {"paused_until": float}, table=False,
              explicit_keys=("paused",)),
    _contract("stats", "intake delayed active window counters dead_letters", "window_seconds",
              dict.fromkeys(_STATS_FIELDS, int)),
    _contract("requeue_dead", "dead_letters intake run_dead", "limit", {"requeued": int, "kept": int}),
)}
SCRIPT_NAMES = tuple(CONTRACTS)


@cache
def script_source(name: str) -> str:
    """The full text of one script: the shared helpers, then the script itself."""
    common = (LUA_DIRECTORY / "common.lua").read_text()
    return f"{common}\n{(LUA_DIRECTORY / f'{name}.lua').read_text()}"


class ScriptPipeline:
    """One pipeline being built: script calls by name (their replies come back decoded) and plain commands."""

    def __init__(self, scripts: Scripts, pipeline: redis.client.Pipeline) -> None:
        self.scripts = scripts
        self.pipeline = pipeline  # for plain commands (LPUSH, LTRIM, ...) between the script calls
        self.contracts: dict[int, ScriptContract] = {}  # command position -> contract of its reply

    def call(self, name: str, source: str, keys: Mapping[str, str] | None = None, /, **arguments: Any) -> None:
        """Queue script ``name`` on ``source``'s keys with ARGV given by name (plain EVALSHA)."""
        contract = CONTRACTS[name]
        key_names = contract.key_names(source, keys)
        self.contracts[len(self.pipeline.command_stack)] = contract
        self.pipeline.evalsha(self.scripts.by_name[name].sha, len(key_names), *key_names,
                              *contract.argument_values(arguments))

    def decode(self, replies: list[Any]) -> list[Any]:
        return [self.contracts[i].decode(reply) if i in self.contracts else reply for i, reply in enumerate(replies)]


class Scripts:
    """The registered scripts of one Redis client, by name."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.by_name: dict[str, Script] = {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}

    def load_all(self) -> None:
        for script in self.by_name.values():
            script.sha = self.client.script_load(script.script)

    def run_pipeline(self, build: Callable[[ScriptPipeline], None]) -> list[Any]:
        """Run ``build``'s calls in one non-transactional pipeline; reload the scripts once on NOSCRIPT.

        Returns every reply in order, those of script calls decoded into their named tuples.
        """
        for attempt in (1, 2):
            pipeline = ScriptPipeline(self, self.client.pipeline(transaction=False))
            build(pipeline)
            try:
                return pipeline.decode(pipeline.pipeline.execute())
            except NoScriptError:
                if attempt == 2:
                    raise
                self.load_all()
            finally:
                pipeline.pipeline.reset()
        raise AssertionError("unreachable")

    def call(self, name: str, source: str, keys: Mapping[str, str] | None = None, /, **arguments: Any) -> Any:
        """One script call in its own round trip; its decoded reply."""
        return self.run_pipeline(lambda pipeline: pipeline.call(name, source, keys, **arguments))[0]
