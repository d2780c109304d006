"""The memory of a browser's process tree, by kind of process: what bench/pageslots.py measures of our slot
and of crawlee's PlaywrightCrawler (bench/crawlee_playwright_peer.py, which imports this in its own venv:
psutil only)."""

from __future__ import annotations

import psutil

# Not a bench: tests/test_benches.py runs only the modules that declare PROMISED_KEYS.
NOT_A_BENCH = "a helper of bench/pageslots.py"


def process_kind(process: psutil.Process) -> str:
    """driver (Playwright's node), browser, or Chromium's --type= (renderer, gpu-process, utility, zygote)."""
    command = process.cmdline()
    if not command or "chrom" not in command[0]:
        return "driver"
    return next((a.split("=", 1)[1] for a in command if a.startswith("--type=")), "browser")


def pss_by_kind(root: psutil.Process, skip: set[int] | None = None) -> dict[str, float]:
    """PSS in MB of ``root``'s descendants but those in ``skip``, by kind; ``uss`` is their private memory
    (blind to other Chromiums on the machine, which shift PSS)."""
    kinds: dict[str, float] = {}
    for process in root.children(recursive=True):
        if skip and process.pid in skip:
            continue
        try:
            kind = process_kind(process)
            memory = process.memory_full_info()
            kinds[kind] = kinds.get(kind, 0.0) + memory.pss / (1024 * 1024)
            kinds["uss"] = kinds.get("uss", 0.0) + memory.uss / (1024 * 1024)
        except psutil.Error:
            continue
    return {kind: round(mb, 1) for kind, mb in sorted(kinds.items())}
