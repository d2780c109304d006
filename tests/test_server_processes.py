"""How the tests' servers stop (tests/fixtures/servers.py): nothing a server started outlives the test.

`airflow standalone` exited on SIGTERM while its scheduler, waiting on a hung API call, ran on for minutes with its
LocalExecutor workers, beside the tests that came after it on the same xdist worker (a CI run, 2026-12-07).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures import servers
from tests.fixtures.servers import ServerProcess, live_members, running_in_group, stop_together

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is left of a group gets half a second here (5 s in the suite's fixtures)."""
    monkeypatch.setattr(servers, "GROUP_GRACE_SECONDS", 0.5)

# A server that starts a child which ignores SIGTERM and outlives it, writes the child's pid, then waits to be stopped.
STUBBORN_CHILD = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(120)
"""


def stubborn_server(tmp_path: Path, name: str) -> tuple[ServerProcess, int]:
    pid_file = tmp_path / f"{name}.pid"
    server = ServerProcess(name, [sys.executable, "-c", STUBBORN_CHILD, str(pid_file)], tmp_path / f"{name}.log",
                           ready=lambda: pid_file.exists() and pid_file.read_text().strip() != "")
    server.start(timeout=30)
    return server, int(pid_file.read_text())


def running(pid: int) -> bool:
    return running_in_group(pid) is not None


def test_a_stopped_server_leaves_no_process_of_its_group(tmp_path: Path) -> None:
    server, child = stubborn_server(tmp_path, "stubborn")
    assert server.process is not None and child in live_members(server.process.pid)
    started = time.monotonic()
    server.stop()
    assert not running(child)  # it ignored SIGTERM: ended by SIGKILL after the grace
    assert live_members(server.process.pid) == []
    assert time.monotonic() - started < 10


def test_servers_stopped_together_leave_no_process_of_their_groups(tmp_path: Path) -> None:
    servers = [stubborn_server(tmp_path, f"stubborn-{number}") for number in range(2)]
    stop_together([server for server, _ in servers])
    assert [running(child) for _, child in servers] == [False, False]


def test_a_server_that_already_exited_still_has_its_leftovers_ended(tmp_path: Path) -> None:
    server, child = stubborn_server(tmp_path, "exited")
    assert server.process is not None
    server.process.kill()  # the server alone dies (a crash), its child runs on
    server.process.wait(timeout=10)
    assert running(child)
    server.stop()
    assert not running(child)


def test_live_members_leaves_other_groups_out(tmp_path: Path) -> None:
    server, child = stubborn_server(tmp_path, "other")
    try:
        assert os.getpid() not in live_members(server.process.pid)  # type: ignore[union-attr]
        assert live_members(os.getpgrp()) and child not in live_members(os.getpgrp())
    finally:
        server.stop()
