"""PID files and process groups: what the launcher started, so a second start starts nothing twice and a
stop stops exactly that. Each service is one process group; its PID file holds the group's id (the
leader's PID), and the service runs while any process of the group is alive."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PidFile:
    path: Path

    def read(self) -> int | None:
        try:
            return int(self.path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def write(self, pid: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f"{pid}\n")

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def running_group(self) -> int | None:
        """The recorded process group if any process of it is alive; a stale file is removed."""
        group = self.read()
        if group is not None and group_alive(group):
            return group
        if group is not None:
            self.remove()
        return None


def group_alive(group: int) -> bool:
    """True while any process of the group is alive (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def signal_group(group: int, signal_number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal_number)


def wait_group_gone(group: int, timeout: float, reap: Callable[[], None] | None = None) -> bool:
    """Wait until no process of the group is alive; ``reap`` collects our own exited children meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        if not group_alive(group):
            return True
        time.sleep(0.2)
    return False
