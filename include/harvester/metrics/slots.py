"""Page slots as the operators' page and the metrics see them: records, proxy bytes, the last decision.

The page-slot component owns these keys (``harvester.redis_keys.PageSlotKeys``: one hash per slot,
a set of slot ids, a proxy-bytes hash and the allocator's last decision as JSON); this module only
reads them, without importing that component (the metrics are served by the distributor).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis

from harvester.errors import redis_storage_errors
from harvester.redis_keys import PageSlotKeys


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class SlotRecord:
    """One page slot: its id, country and state (NO_PAGE ... CLOSING_PAGE), and whatever else it holds."""

    slot_id: str
    country: str
    state: str
    fields: dict[str, str] = field(default_factory=dict)


KEYS = PageSlotKeys()


@redis_storage_errors()
def read_slot_records(client: redis.Redis) -> list[SlotRecord]:
    """Every slot record, in two round trips (ids, then the records)."""
    slot_ids = sorted(_text(slot_id) for slot_id in client.smembers(KEYS.all_slots))
    if not slot_ids:
        return []
    pipeline = client.pipeline(transaction=False)
    for slot_id in slot_ids:
        pipeline.hgetall(KEYS.slot(slot_id))
    records = []
    for slot_id, raw in zip(slot_ids, pipeline.execute(), strict=True):
        fields = {_text(k): _text(v) for k, v in raw.items()}
        if fields:
            records.append(SlotRecord(slot_id, fields.get("country", ""), fields.get("state", ""), fields))
    return records


def slots_by_country_and_state(records: list[SlotRecord]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter[str]] = {}
    for record in records:
        counts.setdefault(record.country, Counter())[record.state] += 1
    return {country: dict(states) for country, states in sorted(counts.items())}


@redis_storage_errors()
def read_proxy_bytes(client: redis.Redis) -> dict[str, int]:
    """Bytes browsed through each country's proxy."""
    prefix = "country:"
    return {name[len(prefix):]: int(amount) for name, amount in
            ((_text(k), v) for k, v in client.hgetall(KEYS.proxy_bytes).items()) if name.startswith(prefix)}


@redis_storage_errors()
def read_last_decision(client: redis.Redis) -> dict[str, Any] | None:
    """The allocator's last decision (slots per country and why), or None before its first run."""
    raw = client.get(KEYS.last_decision)
    return json.loads(raw) if raw else None
