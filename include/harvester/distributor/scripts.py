"""Lua script contracts and the one way to register and call a script (every component's Lua goes through it).

Each ``<component>/lua/NAME.lua`` has a :class:`ScriptContract` in ``<component>/scripts.py`` (``CONTRACTS``):
its KEYS (named as the properties of a key object, :class:`~harvester.redis_keys.SourceKeys` by default or
:class:`~harvester.redis_keys.PageSlotKeys`, or passed explicitly), its ARGV and its reply fields, in order.
The script's header comment names the same things and ``tests/test_lua_contracts.py`` checks they agree for
every ``.lua`` file of the package, so a KEYS list is never copied by hand and a reply is never read by index.
This module holds the distributor's contracts (``lua/``).

Every script is prefixed with its folder's ``common.lua`` (shared helpers). Calls go through
:meth:`Scripts.run_pipeline`, which sends plain EVALSHA in one non-transactional pipeline and reloads the
scripts once if Redis forgot them (after a restart), so a pipelined call stays one round trip instead of
redis-py's extra SCRIPT EXISTS.
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

from harvester.redis_keys import PageSlotKeys, SourceKeys

LUA_DIRECTORY = Path(__file__).with_name("lua")
VARIADIC = "..."  # a last ARGV or reply name ending in this takes the rest of the list


def text(value: bytes | str) -> str:
    """A Redis bulk string as str (clients built without decode_responses return bytes)."""
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class ScriptContract:
    """What one Lua script takes and gives back, by name and in order (its header comment says the same).

    ``keys`` are property names of ``key_space`` (:class:`SourceKeys`, built from the source a call names, or
    another key class whose instance the call passes), except those in ``explicit_keys``, which the caller
    passes itself (pause: the source's ``paused_until`` or its ``host_paused``; keys built from a host or a
    slot id). ``directory`` is the folder of the ``.lua`` file and its ``common.lua``. ``arguments`` are ARGV
    names. ``reply`` maps each reply field to the function that decodes it; a script returning one value
    has ``table=False`` and one field. A last name ending in ``...`` takes the remaining items as a list.
    """

    name: str
    keys: tuple[str, ...]
    arguments: tuple[str, ...]
    reply: Mapping[str, Callable[[Any], Any]]
    table: bool = True
    explicit_keys: frozenset[str] = frozenset()
    key_space: type = SourceKeys
    directory: Path = LUA_DIRECTORY
    reply_type: type = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [name.removesuffix(VARIADIC) for name in self.reply]
        object.__setattr__(self, "reply_type", namedtuple(f"{self.name.title().replace('_', '')}Reply", names))

    @property
    def source(self) -> str:
        """The full text of the script: its folder's shared helpers, then the script itself."""
        return _script_text(self.directory, self.name)

    def key_names(self, keys_of: str | object, explicit: Mapping[str, str] | None = None) -> list[str]:
        """The KEYS of a call: each property of the key object, or the explicit key given.

        ``keys_of`` is a source name (the contract's ``key_space`` is built from it, ``SourceKeys(source)``)
        or an instance of ``key_space`` (``PageSlotKeys()``).
        """
        explicit = dict(explicit or {})
        if set(explicit) != self.explicit_keys:
            raise TypeError(f"{self.name}: explicit keys {sorted(explicit)} given, {sorted(self.explicit_keys)} "
                            "expected")
        key_object = self.key_space(keys_of) if isinstance(keys_of, str) else keys_of
        if not isinstance(key_object, self.key_space):
            raise TypeError(f"{self.name}: keys of {key_object!r} given, {self.key_space.__name__} expected")
        return [explicit[name] if name in explicit else getattr(key_object, name) for name in self.keys]

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


def declare_script(name: str, keys: str, arguments: str, reply: Mapping[str, Callable[[Any], Any]],
                   table: bool = True, explicit_keys: Iterable[str] = (), *, key_space: type = SourceKeys,
                   directory: Path = LUA_DIRECTORY) -> ScriptContract:
    """A contract from space-separated KEYS and ARGV names (as the header lists them)."""
    return ScriptContract(name, tuple(keys.split()), tuple(arguments.split()), reply, table, frozenset(explicit_keys),
                          key_space, directory)


_contract = declare_script


def optional_text(value: bytes | str | None) -> str:
    """A Redis bulk string as str, '' for a nil reply."""
    return "" if value is None else text(value)


_STATS_FIELDS = ("pending", "delayed", "active", "admitted_in_window", "done", "failed", "dead", "admitted",
                 "dead_letters")

_RESERVATION_KEYS = "active active_messages active_hosts host_active_counts counters"

CONTRACTS: dict[str, ScriptContract] = {contract.name: contract for contract in (
    _contract(
        "admit",
        "intake delayed active active_messages active_hosts host_active_counts host_paused window paused_until "
        "counters config dead_letters leases run_dead",
        "wanted publish_grace_seconds window_seconds now expected_source dead_letters_max",
        {"status": text, "wait_seconds": float, "pending": int, "malformed": int, "now": float, "active": int,
         "first_token": int, "messages...": text},
    ),
    _contract("mark_published", "active leases", "queued_lease_seconds now leases...", {"marked": int},
              table=False),
    _contract("start", "active leases counters", "lease_seconds now leases...", {"held...": text}),
    _contract("heartbeat", "active leases counters", "lease_seconds now leases...", {"held...": text}),
    _contract("release", f"{_RESERVATION_KEYS} leases worker_lost", "leases...", {"released": int}, table=False),
    _contract(
        "fail",
        f"{_RESERVATION_KEYS} config delayed dead_letters run_dead host_paused leases worker_lost",
        "task_id next_attempt retry_message original_message reason delay_seconds now host pause_host_seconds "
        "token dead_letters_max host_pause_max_seconds",
        {"outcome": text, "due": float},
    ),
    _contract(
        "reap",
        f"{_RESERVATION_KEYS} config intake dead_letters run_dead delayed leases worker_lost",
        "now limit dead_letters_max",
        {"reaped": int, "returned": int, "dead_entries...": text},
    ),
    _contract(
        "worker_lost",
        f"{_RESERVATION_KEYS} config intake dead_letters run_dead delayed leases worker_lost",
        "now delay_seconds kills_allowed dead_letters_max leases...",
        {"retried": int, "returned": int, "dead_entries...": text},
    ),
    _contract("return_lost", f"{_RESERVATION_KEYS} intake leases", "leases...", {"returned": int}, table=False),
    _contract("acquire_fetch", "window config counters", "window_seconds count now",
              {"granted": int, "wait_seconds": float}),
    _contract("live_tasks", "intake delayed active active_messages", "run_id page", {"task_ids...": text}),
    _contract("pause", "paused", "seconds now host", {"paused_until": float}, table=False,
              explicit_keys=("paused",)),
    _contract("stats", "intake delayed active window counters dead_letters", "window_seconds",
              dict.fromkeys(_STATS_FIELDS, int)),
    _contract("requeue_dead", "dead_letters intake run_dead", "limit", {"requeued": int, "kept": int}),
    _contract("host_fetch", "host_fetch_window host_fetch_active",
              "token per_minute window_seconds min_interval_seconds max_active hold_seconds",
              {"wait_seconds": float}, table=False, explicit_keys=("host_fetch_window", "host_fetch_active")),
    _contract("track_browser_tasks", "recent_tasks recent_task_states", "sample_size state entries...",
              {"recorded": int}, table=False, key_space=PageSlotKeys),
)}
SCRIPT_NAMES = tuple(CONTRACTS)


@cache
def _script_text(directory: Path, name: str) -> str:
    common = (directory / "common.lua").read_text()
    return f"{common}\n{(directory / f'{name}.lua').read_text()}"


def script_source(name: str) -> str:
    """The full text of one distributor script: the shared helpers, then the script itself."""
    return CONTRACTS[name].source


class ScriptPipeline:
    """One pipeline being built: script calls by name (their replies come back decoded) and plain commands."""

    def __init__(self, scripts: Scripts, pipeline: redis.client.Pipeline) -> None:
        self.scripts = scripts
        self.pipeline = pipeline  # for plain commands (LPUSH, LTRIM, ...) between the script calls
        self.contracts: dict[int, ScriptContract] = {}  # command position -> contract of its reply

    def call(self, name: str, keys_of: str | object, keys: Mapping[str, str] | None = None, /,
             **arguments: Any) -> None:
        """Queue script ``name`` on ``keys_of``'s keys (a source name or a key object) with ARGV by name."""
        contract = self.scripts.contracts[name]
        key_names = contract.key_names(keys_of, keys)
        self.contracts[len(self.pipeline.command_stack)] = contract
        self.pipeline.evalsha(self.scripts.by_name[name].sha, len(key_names), *key_names,
                              *contract.argument_values(arguments))

    def decode(self, replies: list[Any]) -> list[Any]:
        return [self.contracts[i].decode(reply) if i in self.contracts else reply for i, reply in enumerate(replies)]


class Scripts:
    """The registered scripts of one Redis client, by name: the distributor's, or another component's
    ``CONTRACTS`` (``Scripts(client, harvester.pageslots.scripts.CONTRACTS)``)."""

    def __init__(self, client: redis.Redis, contracts: Mapping[str, ScriptContract] | None = None) -> None:
        self.client = client
        self.contracts: Mapping[str, ScriptContract] = CONTRACTS if contracts is None else contracts
        self.by_name: dict[str, Script] = {name: client.register_script(contract.source)
                                           for name, contract in self.contracts.items()}

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

    def call(self, name: str, keys_of: str | object, keys: Mapping[str, str] | None = None, /,
             **arguments: Any) -> Any:
        """One script call in its own round trip; its decoded reply."""
        return self.run_pipeline(lambda pipeline: pipeline.call(name, keys_of, keys, **arguments))[0]
