"""One source's queue figures, computed atomically by the distributor's ``stats.lua`` and read through
``RateLimitStore`` by everyone who shows them (the metrics, the operators' page, the tools)."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["STATS_FIELDS", "SourceStats"]


@dataclass(frozen=True)
class SourceStats:
    """One source's numbers for the UI and metrics (DESIGN.md section 4), in the order ``stats.lua`` gives them."""

    pending: int
    delayed: int
    active: int
    admitted_last_minute: int  # fetch starts in the rolling rate window (settings.rate_window_seconds)
    done: int
    failed: int
    dead_letters_waiting: int  # entries now in the source's dead-letter list
    admitted: int = 0  # total ever admitted
    dead_letters_total: int = 0  # tasks ever dead-lettered (requeued and dropped ones included)


STATS_FIELDS = tuple(field.name for field in fields(SourceStats))  # the names and order of stats.lua's reply
