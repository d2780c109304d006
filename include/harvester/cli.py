"""The `harvester` command. Each component registers its own subcommands (a `register(subparsers)`
function in its `commands` module), and `harvester.processes` those of processes composed of several
components (`harvester distributor`), so this file only lists them."""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from harvester import processes
from harvester.config import commands as config_commands
from harvester.distributor import commands as distributor_commands
from harvester.pageslots import commands as pageslots_commands
from harvester.producer import commands as producer_commands
from harvester.scraping import commands as scraping_commands
from harvester.scraping import suggest as suggest_commands
from harvester.services import commands as services_commands
from harvester.storage import commands as storage_commands

# Plain imports, so a generic import reader (import-linter) sees every edge of the entry point; each
# commands module imports its component's heavy parts inside its handlers.
COMMAND_MODULES: tuple[ModuleType, ...] = (
    services_commands, config_commands, scraping_commands, suggest_commands, distributor_commands, processes,
    producer_commands, pageslots_commands, storage_commands,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harvester", description="Harvest structured data on a schedule.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
