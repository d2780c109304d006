"""Shared fixtures: real servers on their own loopback ports, never those of `make run`.

`make test` runs the suite in parallel (pytest-xdist, ``--dist loadgroup``): every worker is a
pytest session of its own, so each starts its own servers from tests/fixtures/ on free ports. Two
hooks here keep that fast and correct:

- the tests of a file that defines a module- or class-scoped fixture (the cluster topology, one DAG-folder
  parse) are one work unit, so that fixture is built once, on one worker;
- the longest tests are handed out first (longest-processing-time first), so no worker picks up a
  five-minute test when the others are nearly done.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.fixtures.servers", "tests.fixtures.airflow_db", "tests.fixtures.demo_site",
                  "tests.fixtures.forward_proxy", "tests.fixtures.hostile_hosts", "tests.fixtures.secret",
                  "tests.fixtures.sentinel"]

# Measured on 2 cores (about 2-6 minutes each): started first, in this order. Other `slow` tests follow,
# then the rest in collection order. A node id prefix: a file holds every test of it. The first four start
# at once (one per worker of `make test` on 2 cores), so the Airflow-heavy ones (the cluster, standalone,
# `airflow dags test`) are spread out rather than all importing Airflow in the same minute.
LONGEST_FIRST = (
    "tests/services/test_cluster_topology.py",
    "tests/reliability/test_fault_matrix.py::test_row_10_",
    "tests/observability/test_browser.py",
    "tests/pageslots/test_slot_hosting.py::test_slots_follow_demand",
    "tests/producer/test_dag_end_to_end.py",
    "tests/pageslots/test_slot_hosting.py",
    "tests/pageslots/test_browser_pages.py",
    "tests/producer/test_standalone_progress.py",
    # the longest bench smokes (each 1-2.5 minutes under the suite's load; 2026-12-06) and the api-server files
    # (one server per file, about a minute): started before the short tests so none of them is the last to end
    "tests/test_benches.py::test_each_bench_runs_in_its_smoke_mode_and_prints_every_promised_key[crawl]",
    "tests/test_benches.py::test_each_bench_runs_in_its_smoke_mode_and_prints_every_promised_key[broad]",
    "tests/observability/test_plugin_access.py",
    "tests/test_benches.py::test_each_bench_runs_in_its_smoke_mode_and_prints_every_promised_key[scale]",
    "tests/observability/test_plugin_api.py",
)
SHARED_SCOPES = ("module", "class", "package")
TESTS = Path(__file__).resolve().parent


def files_with_shared_fixtures(tests: Path = TESTS) -> set[str]:
    """Test files (node id form) that define a module-, class- or package-scoped fixture: each is one work unit.

    Read from the source (the xdist controller does not collect), and a scope of our own rather than
    ``xdist_group`` marks: pytest 9 builds node ids from ``Node._id``, so pytest-xdist 3.8's loadgroup, which
    appends ``@group`` to ``item._nodeid``, no longer groups anything.
    """
    found: set[str] = set()
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and ast.unparse(node.func) in ("pytest.fixture", "fixture")
                    and any(keyword.arg == "scope" and isinstance(keyword.value, ast.Constant)
                            and keyword.value.value in SHARED_SCOPES for keyword in node.keywords)):
                found.add(path.relative_to(tests.parent).as_posix())
    return found


def run_order(item: pytest.Item) -> int:
    for rank, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker collects, and all must agree on the order
        items.sort(key=run_order)  # stable: collection order within each rank


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup``: one test per work unit, except a file with a shared fixture, which is one unit."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    shared = files_with_shared_fixtures()

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return file if file in shared else nodeid

    return SharedFixtureScheduling(config, log)
