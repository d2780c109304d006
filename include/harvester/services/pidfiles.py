"""PID files under var/run/: what `make run` started, so `make stop` stops exactly that."""

from __future__ import annotations

import os
import signal
import time
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

    def running_pid(self) -> int | None:
        """The recorded PID if that process is alive; a stale file is removed."""
        pid = self.read()
        if pid is not None and process_alive(pid):
            return pid
        if pid is not None:
            self.remove()
        return None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive for our purposes
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def stop_process_group(pid: int, timeout: float = 20.0) -> bool:
    """SIGTERM the process group led by ``pid``, then SIGKILL after ``timeout``. True if it was running."""
    if not process_alive(pid):
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process_alive(pid):
                return True
            time.sleep(0.1)
    return True
