"""Extraction health: per attribute, the share of a run's extracted records that had it, against earlier runs.

The share is over every record the workers extracted, stored or rejected: a selector that
stops matching a required field rejects the records, so a share over the stored ones alone stayed at
100 % while the run stored nothing. The workers count it per run (``seen:``/``present:`` figures, see
:mod:`harvester.scraping.extraction.tally`); a run without those figures (older, or expired) is measured
on its stored records.

A site that changes its markup does not fail: its pages still load and the records still store,
with an attribute gone. Comparing each attribute's share with the median of the previous runs'
shares catches it; a drop past the source's ``drift_threshold`` (percentage points) is "selector
drift", shown on the operators' page, in the run's report and as a metric.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from typing import Any

import redis
from pymongo.collection import Collection

from harvester.redis_keys import SourceKeys

PREVIOUS_RUNS = 10  # the median is taken over at most this many earlier reported runs


def attribute_shares(collection: Collection, run_id: str, attributes: Iterable[str]) -> tuple[int, dict[str, float]]:
    """Records of the run and, per attribute, the share (0-1) of them with a value (not null, not [])."""
    total = collection.count_documents({"run_id": run_id})
    if total == 0:
        return 0, {}
    shares = {name: collection.count_documents({"run_id": run_id, name: {"$nin": [None, []]}}) / total
              for name in attributes}
    return total, shares


def extracted_shares(figures: dict[str, int], attributes: Iterable[str]) -> tuple[int, dict[str, float]]:
    """Records extracted (stored or rejected) and, per attribute, the share of them that had a value."""
    total = int(figures.get("records_extracted", 0))
    if total == 0:
        return 0, {}
    shares = {}
    for name in attributes:
        seen = int(figures.get(f"seen:{name}", 0))
        if seen:
            shares[name] = int(figures.get(f"present:{name}", 0)) / seen
    return total, shares


def previous_shares(runs: Collection, source: str, run_id: str, limit: int = PREVIOUS_RUNS) -> list[dict[str, float]]:
    """The attribute shares of the source's earlier reported runs, newest first."""
    cursor = runs.find(
        {"source": source, "run_id": {"$ne": run_id}, "report.extraction.shares": {"$exists": True}},
        {"_id": 0, "report.extraction.shares": 1}, sort=[("started_at", -1)], limit=limit)
    return [document["report"]["extraction"]["shares"] for document in cursor]


def assess_drift(shares: dict[str, float], previous: list[dict[str, float]], threshold_points: float
                 ) -> dict[str, dict[str, Any]]:
    """attribute -> {share, median, drop (points), drift}; no history means no drift."""
    health: dict[str, dict[str, Any]] = {}
    for name, share in shares.items():
        history = [run[name] for run in previous if name in run]
        median = statistics.median(history) if history else None
        drop = round((median - share) * 100, 2) if median is not None else 0.0
        health[name] = {"share": round(share, 4), "median": None if median is None else round(median, 4),
                        "drop": drop, "drift": median is not None and drop >= threshold_points}
    return health


def extraction_report(collection: Collection, runs: Collection, source: str, run_id: str,
                      attributes: Iterable[str], threshold_points: float,
                      figures: dict[str, int] | None = None) -> dict[str, Any]:
    """The report's ``extraction`` section: shares, per-attribute health, and the drifted attributes; over the
    records extracted (``figures``, the run's worker counters) when the workers counted them."""
    attributes = list(attributes)
    records, shares = extracted_shares(figures or {}, attributes)
    if not records:
        records, shares = attribute_shares(collection, run_id, attributes)
    health = assess_drift(shares, previous_shares(runs, source, run_id), threshold_points) if records else {}
    return {"records": records, "shares": shares, "threshold_points": threshold_points, "attributes": health,
            "selector_drift": sorted(name for name, entry in health.items() if entry["drift"])}


def publish_health(client: redis.Redis, source: str, extraction: dict[str, Any]) -> None:
    """Keep the last run's health in Redis, where the metrics collector and the page read it."""
    key = SourceKeys(source).extraction_health
    health = extraction.get("attributes") or {}
    pipeline = client.pipeline(transaction=True)
    pipeline.delete(key)
    if health:
        pipeline.hset(key, mapping={name: json.dumps(entry) for name, entry in health.items()})
    pipeline.execute()
