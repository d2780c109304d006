"""A slot's Chromium among this machine's processes: the flags that name its slot and owner on its command line,
found again by them, and killed with everything it started (a browser that hangs answers no Playwright call)."""

from __future__ import annotations

import contextlib

import psutil

__all__ = ["OWNER_FLAG", "SLOT_FLAG", "find_browser_pid", "flag_value", "kill_process_tree"]

SLOT_FLAG = "--harvester-slot="  # Chromium ignores unknown switches; ours name the slot and its owner
OWNER_FLAG = "--harvester-slot-owner="


def find_browser_pid(slot_id: str) -> int | None:
    """The Chromium browser process (not a renderer) launched for ``slot_id`` by this process."""
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            command = process.cmdline()
            if flag_value(command, SLOT_FLAG) == slot_id and not any(a.startswith("--type=") for a in command):
                return process.pid
    return None


def flag_value(command: list[str], flag: str) -> str | None:
    for argument in command:
        if argument.startswith(flag):
            return argument[len(flag):]
    return None


def kill_process_tree(pid: int) -> int:
    """SIGKILL a process and everything under it; returns how many were killed."""
    try:
        root = psutil.Process(pid)
        processes = [*root.children(recursive=True), root]
    except psutil.Error:
        return 0
    killed = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
            killed += 1
    psutil.wait_procs(processes, timeout=5)
    return killed
