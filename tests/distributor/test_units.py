"""Pure logic of the distributor: backoff, host keys, fair order. No server."""

from __future__ import annotations

import re
from typing import Any

import pytest
from harvester.distributor import RetryPolicy
from harvester.distributor.hosts import host_of
from harvester.distributor.intake import RegisteredSource
from harvester.distributor.scripts import CONTRACTS, LUA_DIRECTORY, SCRIPT_NAMES, script_source
from harvester.distributor.service import Distributor
from harvester.redis_keys import SourceKeys

pytestmark = pytest.mark.unit


def test_backoff_doubles_then_caps_and_retry_after_wins():
    policy = RetryPolicy(base_seconds=2, max_seconds=30, jitter=0)
    assert [policy.delay(attempt) for attempt in range(6)] == [2, 4, 8, 16, 30, 30]
    assert policy.delay(0, retry_after=120) == 120  # the server knows better than our backoff
    assert policy.delay(3, retry_after=-5) == 0
    jittered = RetryPolicy(base_seconds=10, max_seconds=1000, jitter=0.1)
    assert all(10 <= jittered.delay(0) <= 11 for _ in range(50))


@pytest.mark.parametrize(("url", "host"), [
    ("https://Example.COM/a?b#c", "example.com"),
    ("http://user:pw@shop.test:8080/x", "shop.test:8080"),
    ("http://127.0.0.1:8008", "127.0.0.1:8008"),
    ("mailto:someone@example.com", ""),
    ("/relative/path", ""),
])
def test_host_of_matches_the_lua_rule(url: str, host: str):
    assert host_of(url) == host


def source(name: str, priority: str = "normal") -> RegisteredSource:
    return RegisteredSource(name=name, queue="default", priority=priority, max_active=1, per_minute=1,
                            per_host_max_active=0, retries=3)


def test_fair_order_puts_high_priority_first_and_rotates_inside_each_tier():
    sources = [source("a"), source("b"), source("c"), source("x", "high"), source("y", "high")]
    orders = [[s.name for s in Distributor.fair_order(sources, round_number)] for round_number in range(3)]
    assert orders == [["x", "y", "a", "b", "c"], ["y", "x", "b", "c", "a"], ["x", "y", "c", "a", "b"]]


def test_every_script_has_a_header_naming_its_keys_and_units():
    for name in SCRIPT_NAMES:
        own = (LUA_DIRECTORY / f"{name}.lua").read_text()
        header = "\n".join(line for line in own.splitlines() if line.startswith("--"))
        assert own.startswith(f"-- {name}"), name
        assert "KEYS[1]" in header and ("(s)" in header or "(count" in header or "no times" in header), name
        assert script_source(name).startswith("-- Shared helpers")


def declared_in_header(script: str) -> dict[str, Any]:
    """KEYS, ARGV and reply names as a script's header comment declares them.

    Lines starting ``KEYS[n] name`` or ``ARGV[n] name`` (``ARGV[n..] name`` for "the rest"), then
    ``Returns {a, b, c...}`` for a table (notes in parentheses) or ``Returns name: ...`` for one value.
    """
    header = "\n".join(line.removeprefix("--").strip() for line in script.splitlines() if line.startswith("--"))
    declarations = "\n".join(line for line in header.splitlines() if line.startswith(("KEYS[", "ARGV[")))
    keys = [(int(n), name) for n, name in re.findall(r"KEYS\[(\d+)\]\s+([a-z_]+)", declarations)]
    arguments = [(int(n), name + ("..." if rest else ""))
                 for n, rest, name in re.findall(r"ARGV\[(\d+)(\.\.)?\]\s+([a-z_]+)", declarations)]
    for numbered in (keys, arguments):
        assert [n for n, _ in numbered] == list(range(1, len(numbered) + 1)), f"numbered out of order: {numbered}"
    returns = header[header.index("Returns "):].removeprefix("Returns ")
    if returns.startswith("{"):
        fields = re.sub(r"\([^)]*\)", "", returns[1:returns.index("}")])
        reply, table = [" ".join(field.split()) for field in fields.split(",")], True
    else:
        reply, table = [returns.split(":")[0].strip()], False
    return {"keys": [name for _, name in keys], "arguments": [name for _, name in arguments], "reply": reply,
            "table": table}


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_each_script_header_names_the_keys_arguments_and_reply_of_its_contract(name: str):
    contract = CONTRACTS[name]
    script = (LUA_DIRECTORY / f"{name}.lua").read_text()
    assert declared_in_header(script) == {"keys": list(contract.keys), "arguments": list(contract.arguments),
                                          "reply": list(contract.reply), "table": contract.table}
    body = "\n".join(line for line in script.splitlines() if not line.startswith("--"))
    used_keys = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", body)}
    assert used_keys == set(range(1, len(contract.keys) + 1)), "the body uses exactly the declared KEYS"
    fixed_arguments = [argument for argument in contract.arguments if not argument.endswith("...")]
    assert {int(n) for n in re.findall(r"ARGV\[(\d+)\]", body)} <= set(range(1, len(fixed_arguments) + 1))
    for key in set(contract.keys) - contract.explicit_keys:
        assert isinstance(getattr(SourceKeys, key), property), f"{name}: {key} is not a SourceKeys key"


def test_the_header_parser_sees_a_mismatch():
    script = (LUA_DIRECTORY / "fail.lua").read_text().replace("KEYS[8] dead_letters", "KEYS[8] dead letters")
    assert declared_in_header(script)["keys"][7] == "dead"
    with pytest.raises(AssertionError, match="out of order"):
        declared_in_header("-- KEYS[2] intake\n-- Returns x: y")


def test_a_contract_builds_keys_and_argv_by_name_and_decodes_replies_by_name():
    admit = CONTRACTS["admit"]
    keys = SourceKeys("shop")
    assert admit.key_names("shop")[:3] == [keys.intake, keys.delayed, keys.active]
    assert admit.key_names("shop")[-1] == keys.dead_letters
    assert admit.argument_values({"wanted": 5, "lease_seconds": 120, "window_seconds": 60, "now": "",
                                  "expected_source": "shop"}) == [5, 120, 60, "", "shop"]
    with pytest.raises(TypeError, match="expected"):
        admit.argument_values({"wanted": 5})
    reply = admit.decode([b"ok", b"-1", 3, 0, b"12.5", 2, b'{"a": 1}', b'{"b": 2}'])
    assert (reply.status, reply.wait_seconds, reply.pending, reply.now, reply.active) == ("ok", -1.0, 3, 12.5, 2)
    assert reply.messages == ['{"a": 1}', '{"b": 2}']
    heartbeat = CONTRACTS["heartbeat"]
    assert heartbeat.argument_values({"lease_seconds": 9, "now": "", "task_ids": ["a", "b"]}) == [9, "", "a", "b"]
    assert heartbeat.decode(2).extended == 2
    pause = CONTRACTS["pause"]
    assert pause.key_names("shop", {"paused": keys.host_paused}) == [keys.host_paused]
    with pytest.raises(TypeError, match="explicit keys"):
        pause.key_names("shop")
