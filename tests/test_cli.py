"""The `harvester` command: each component's ``commands.py`` is listed in ``harvester.cli.COMMAND_MODULES``,
every subcommand has a handler, and building the parser (``harvester --help``) loads no client or parser
library: a commands module imports its component's work inside its handlers."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from harvester.cli import COMMAND_MODULES, build_parser
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit

PACKAGE = REPOSITORY_ROOT / "include" / "harvester"
# what `harvester --help` must not import: each costs a tenth of a second or more of CPU at every call
HEAVY_LIBRARIES = ("aiohttp", "airflow", "celery", "httpx", "lxml", "parsel", "playwright", "pyarrow", "pymongo",
                   "redis", "rich")


def test_every_commands_module_is_listed() -> None:
    listed = {module.__name__ for module in COMMAND_MODULES}
    found = {".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts) for path in PACKAGE.rglob("commands.py")}
    assert found - listed == set(), "add each component's commands module to harvester.cli.COMMAND_MODULES"
    assert all(callable(getattr(module, "register", None)) for module in COMMAND_MODULES)


def test_every_subcommand_has_a_handler() -> None:
    subparsers = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    without = [name for name, parser in subparsers.choices.items() if parser.get_default("handler") is None]
    assert not without, f"subcommands without set_defaults(handler=...): {without}"


def test_the_parser_loads_no_heavy_library() -> None:
    probe = ("import sys; from harvester.cli import build_parser; build_parser(); "
             f"print(sorted({set(HEAVY_LIBRARIES)!r} & {{name.split('.')[0] for name in sys.modules}}))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", f"harvester --help imports {loaded}: import them inside the handler"
