"""Shared fixtures: real servers on their own loopback ports, never those of `make run`.

`make test` runs the suite in parallel (pytest-xdist, ``--dist loadgroup``): every worker is a
pytest session of its own, so each starts its own servers from tests/fixtures/ on free ports. Two
hooks here keep that fast and correct:

- tests that share a module- or class-scoped fixture (the cluster topology, one DAG-folder parse)
  form one xdist group, so that fixture is built once, on one worker;
- the longest tests are handed out first (longest-processing-time first), so no worker picks up a
  five-minute test when the others are nearly done.
"""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.fixtures.servers", "tests.fixtures.demo_site", "tests.fixtures.forward_proxy"]

# Measured on 2 cores (about 2-6 minutes each): started first, in this order. Other `slow` tests follow,
# then the rest in collection order. A node id prefix: a file holds every test of it.
LONGEST_FIRST = (
    "tests/services/test_cluster_topology.py",
    "tests/observability/test_browser.py",
    "tests/producer/test_dag_end_to_end.py",
    "tests/producer/test_standalone_progress.py",
    "tests/reliability/test_fault_matrix.py::test_row_10_",
    "tests/pageslots/test_slot_hosting.py",
)
SHARED_SCOPES = ("module", "class", "package")


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that uses a module-, class- or package-scoped fixture: its file."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for definitions in info.name2fixturedefs.values():
        if any(definition.scope in SHARED_SCOPES for definition in definitions):
            return item.nodeid.split("::", 1)[0]
    return None


def run_order(item: pytest.Item) -> int:
    for rank, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (group := shared_fixture_group(item)):
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker collects, and all must agree on the order
        items.sort(key=run_order)  # stable: collection order within each rank
