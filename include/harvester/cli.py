"""The `harvester` command. Each component registers its own subcommands (a `register(subparsers)`
function in its `commands` module), so this file only lists them."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES: tuple[str, ...] = (
    "harvester.services.commands",
    "harvester.config.commands",
    "harvester.scraping.commands",
    "harvester.scraping.suggest",
    "harvester.distributor.commands",
    "harvester.producer.commands",
    "harvester.pageslots.commands",
    "harvester.storage.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harvester", description="Harvest structured data on a schedule.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
