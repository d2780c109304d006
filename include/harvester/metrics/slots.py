"""Page slots as the operators' page and the metrics count them.

The page-slot component owns the slot records and reads them (``SlotRegistry.slots``, the proxy bytes
and the allocator's last decision in ``harvester.pageslots``); this module only counts what it read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from harvester.pageslots import SlotRecord

__all__ = ["slots_by_country_and_state"]


def slots_by_country_and_state(records: Iterable[SlotRecord]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter[str]] = {}
    for record in records:
        counts.setdefault(record.country, Counter())[str(record.state)] += 1
    return {country: dict(states) for country, states in sorted(counts.items())}
