"""One source's queue figures, shared by the distributor (which computes them atomically in Lua) and the
metrics (which read them without the distributor: it must not be a dependency of what it serves)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SourceStats"]


@dataclass(frozen=True)
class SourceStats:
    """One source's numbers for the UI and metrics (DESIGN.md section 4)."""

    pending: int
    delayed: int
    active: int
    admitted_last_minute: int  # fetch starts in the rolling rate window (settings.rate_window_seconds)
    done: int
    failed: int
    dead: int  # entries now in dead letters
    admitted: int = 0  # total ever admitted
    dead_total: int = 0  # total ever dead-lettered (requeued ones included)
