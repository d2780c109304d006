"""Every ``.lua`` file of the package has a contract (KEYS, ARGV, reply by name) in its component's
``scripts.py``, and the script's header comment says the same, so no KEYS list is copied by hand."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
from harvester.redis_scripts import ScriptContract
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit

PACKAGE = REPOSITORY_ROOT / "include" / "harvester"
LUA_FILES = sorted(path for path in PACKAGE.rglob("*.lua") if path.name != "common.lua")


def contracts_beside(directory: Path) -> dict[str, ScriptContract]:
    """The ``CONTRACTS`` of the ``scripts.py`` beside a ``lua/`` folder (``harvester.<component>.scripts``)."""
    module = ".".join(directory.parent.relative_to(PACKAGE.parent).parts) + ".scripts"
    return importlib.import_module(module).CONTRACTS


def contract_of(path: Path) -> ScriptContract:
    contracts = contracts_beside(path.parent)
    assert path.stem in contracts, f"{path.relative_to(REPOSITORY_ROOT)} has no contract in its scripts.py"
    contract = contracts[path.stem]
    assert contract.directory == path.parent
    return contract


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


def test_the_package_has_lua_in_more_than_one_component():
    assert {path.parent.parent.name for path in LUA_FILES} >= {"distributor", "pageslots", "workers"}


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_each_script_has_a_header_naming_its_keys_and_units(path: Path):
    own = path.read_text()
    header = "\n".join(line for line in own.splitlines() if line.startswith("--"))
    assert own.startswith(f"-- {path.stem}:")
    assert "KEYS[1]" in header and ("(s" in header or "(count" in header or "no times" in header)
    contract = contract_of(path)
    assert contract.source.startswith((path.parent / "common.lua").read_text())


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_each_script_header_names_the_keys_arguments_and_reply_of_its_contract(path: Path):
    contract = contract_of(path)
    script = path.read_text()
    assert declared_in_header(script) == {"keys": list(contract.keys), "arguments": list(contract.arguments),
                                          "reply": list(contract.reply), "table": contract.table}
    body = "\n".join(line for line in script.splitlines() if not line.startswith("--"))
    used_keys = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", body)}
    assert used_keys == set(range(1, len(contract.keys) + 1)), "the body uses exactly the declared KEYS"
    fixed_arguments = [argument for argument in contract.arguments if not argument.endswith("...")]
    assert {int(n) for n in re.findall(r"ARGV\[(\d+)\]", body)} <= set(range(1, len(fixed_arguments) + 1))
    for key in set(contract.keys) - contract.explicit_keys:
        assert isinstance(getattr(contract.key_space, key, None), property), (
            f"{contract.name}: {key} is not a {contract.key_space.__name__} key")
    assert contract.explicit_keys <= set(contract.keys)


def test_every_contract_has_its_script():
    for directory in {path.parent for path in LUA_FILES}:
        for name, contract in contracts_beside(directory).items():
            assert (contract.directory / f"{name}.lua").is_file(), name


def test_the_header_parser_sees_a_mismatch():
    script = (PACKAGE / "distributor" / "lua" / "fail.lua").read_text().replace(
        "KEYS[8] dead_letters", "KEYS[8] dead letters")
    assert declared_in_header(script)["keys"][7] == "dead"
    with pytest.raises(AssertionError, match="out of order"):
        declared_in_header("-- KEYS[2] intake\n-- Returns x: y")
