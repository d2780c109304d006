"""What one Lua script takes and gives back, by name and in order: its :class:`ScriptContract`.

A component keeps its scripts as ``<component>/lua/NAME.lua`` (each prefixed with that folder's
``common.lua``) and their contracts in the ``scripts.py`` beside the folder. The script's header comment
names the same KEYS, ARGV and reply, and ``tests/test_lua_contracts.py`` checks that both agree for every
``.lua`` file of the package, so a KEYS list is never copied by hand and a reply is never read by index.
"""

from __future__ import annotations

import hashlib
from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

__all__ = ["VARIADIC", "ScriptContract", "declare_script", "optional_text", "text"]

VARIADIC = "..."  # a last ARGV or reply name ending in this takes the rest of the list


def text(value: bytes | str) -> str:
    """A Redis bulk string as str (clients built without decode_responses return bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def optional_text(value: bytes | str | None) -> str:
    """A Redis bulk string as str, '' for a nil reply."""
    return "" if value is None else text(value)


@cache
def _script_text(directory: Path, name: str) -> str:
    common = (directory / "common.lua").read_text()
    return f"{common}\n{(directory / f'{name}.lua').read_text()}"


@dataclass(frozen=True)
class ScriptContract:
    """One script's KEYS, ARGV and reply fields, in order (its header comment says the same).

    ``keys`` are property names of ``key_space`` (a key class of :mod:`harvester.redis_keys`, built from
    the source a call names, or an instance the call passes), except those in ``explicit_keys``, which the
    caller passes itself (keys built from a host, a slot id or a country). ``directory`` is the folder of
    the ``.lua`` file and its ``common.lua``. ``arguments`` are ARGV names. ``reply`` maps each reply field
    to the function that decodes it; a script returning one value has ``table=False`` and one field. A
    last name ending in ``...`` takes the remaining items as a list.
    """

    name: str
    keys: tuple[str, ...]
    arguments: tuple[str, ...]
    reply: Mapping[str, Callable[[Any], Any]]
    directory: Path
    key_space: type
    table: bool = True
    explicit_keys: frozenset[str] = frozenset()
    reply_type: type = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [name.removesuffix(VARIADIC) for name in self.reply]
        object.__setattr__(self, "reply_type", namedtuple(f"{self.name.title().replace('_', '')}Reply", names))

    @property
    def source(self) -> str:
        """The full text of the script: its folder's shared helpers, then the script itself."""
        return _script_text(self.directory, self.name)

    @cached_property
    def sha(self) -> str:
        """The SHA1 Redis knows the script by (EVALSHA), computed once per process."""
        return hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()

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

    @cached_property
    def argument_names(self) -> frozenset[str]:
        """The ARGV names a call gives (a variadic one without its ``...``)."""
        return frozenset(name.removesuffix(VARIADIC) for name in self.arguments)

    def argument_values(self, arguments: Mapping[str, Any]) -> list[Any]:
        """ARGV in the script's order from arguments given by name; every name must be given, no other."""
        if arguments.keys() != self.argument_names:
            raise TypeError(f"{self.name}: arguments {sorted(arguments)} given, {sorted(self.argument_names)} "
                            "expected")
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


def declare_script(name: str, keys: str, arguments: str, reply: Mapping[str, Callable[[Any], Any]], *,
                   directory: Path, key_space: type, table: bool = True,
                   explicit_keys: Iterable[str] = ()) -> ScriptContract:
    """A contract from space-separated KEYS and ARGV names (as the header lists them)."""
    return ScriptContract(name, tuple(keys.split()), tuple(arguments.split()), reply, directory, key_space, table,
                          frozenset(explicit_keys))
