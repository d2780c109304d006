"""The incremental part of a run's report: what changed, what a 304 kept, what sitemaps gave.

Read from the data itself where it can be (a run is green only when its data is, DESIGN.md section 11):
``records_changed`` are the run's records whose ``changed_at`` moved in this run, ``records_not_modified``
those a 304 kept (``_http.not_modified_at``), with the bytes their last bodies had (``bytes_saved``);
``records_unchanged`` were fetched again and found equal. The sitemap figures only workers see come from
the run's counters in Redis (:class:`harvester.storage.run_figures.RunFigures`), with the sitemaps that
were cut or refused, named.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import redis
from pymongo.collection import Collection

from harvester.storage import RunFigures


def incremental_report(output: Collection, redis_client: redis.Redis, source: str, run_id: str,
                       started_at: datetime, report: dict[str, Any]) -> dict[str, Any]:
    """The figures added to ``report`` (which holds ``records_stored`` and ``records_new``)."""
    changed = output.count_documents({"run_id": run_id, "changed_at": {"$gte": started_at},
                                      "first_seen_at": {"$lt": started_at}})
    kept = list(output.aggregate([
        {"$match": {"run_id": run_id, "_http.not_modified_at": {"$gte": started_at}}},
        {"$group": {"_id": None, "records": {"$sum": 1}, "bytes": {"$sum": "$_http.bytes"}}},
    ]))
    not_modified = int(kept[0]["records"]) if kept else 0
    bytes_saved = int(kept[0]["bytes"]) if kept else 0
    figures, problems = RunFigures(redis_client).read(source, run_id)
    stored, new = int(report.get("records_stored", 0)), int(report.get("records_new", 0))
    return {
        "records_changed": changed,
        "records_unchanged": max(0, stored - new - changed - not_modified),
        "records_not_modified": not_modified,
        "bytes_saved": bytes_saved,
        # items found gone in this run (their records got ``gone_at``) and found again (``gone_at`` cleared)
        "records_gone": int(figures.get("records_gone", 0)),
        "records_back": int(figures.get("records_back", 0)),
        "sitemaps": {name: amount for name, amount in figures.items() if name.startswith("sitemap")},
        "sitemap_problems": problems,
    }
