"""A run's outcome from its data (DESIGN.md section 11): green, degraded or failed, in words.

The report's figures are compared with the source's :class:`~harvester.config.Quality` thresholds (a
trigger's params over them): the share of rejected records (each rejection by attribute and rule, as the
workers counted it), the share of answering pages whose records were stored, the share of settled tasks
that died, and the records stored. A breach makes the run ``failed`` (the report task then fails, so the
DAG run is red and Airflow's callbacks, emails and retries apply) or, with ``on_breach: warn``,
``degraded``: green in Airflow, flagged on the page and in the metrics. Selector drift alone is
``degraded`` (it has its own alert).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis

from harvester.config import Quality
from harvester.errors import redis_storage_errors
from harvester.redis_keys import SourceKeys

__all__ = ["REACHED_PAGE_REASONS", "assess_quality", "by_attribute_and_rule", "publish_run_quality",
           "quality_figures"]

# Dead-letter reasons (before the first colon) of tasks whose page answered: they count as reached pages.
REACHED_PAGE_REASONS = ("record rejected", "parse_error", "storage failed")
GREEN, DEGRADED, FAILED = "green", "degraded", "failed"
REASONS_NAMED = 3  # attribute/rule pairs the one-line reason names (the report has them all)


def by_attribute_and_rule(figures: Mapping[str, int], prefix: str) -> dict[str, dict[str, int]]:
    """``<prefix>:<rule>:<attribute>`` counters as attribute -> rule -> count."""
    found: dict[str, dict[str, int]] = {}
    for name, amount in figures.items():
        if name.startswith(f"{prefix}:") and amount:
            rule, _, attribute = name[len(prefix) + 1:].rpartition(":")
            found.setdefault(attribute, {})[rule] = found.get(attribute, {}).get(rule, 0) + int(amount)
    return found


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def quality_figures(report: Mapping[str, Any], figures: Mapping[str, int]) -> dict[str, Any]:
    """The report's quality figures: records extracted and rejected, rejections and dropped values by attribute
    and rule, pages reached, and the three shares the thresholds read."""
    failures = report.get("failures_by_reason") or {}
    stored, failed = int(report.get("tasks_stored", 0)), int(report.get("tasks_failed", 0))
    reached = stored + sum(int(failures.get(reason, 0)) for reason in REACHED_PAGE_REASONS)
    extracted = int(figures.get("records_extracted", 0))
    rejected = int(figures.get("records_rejected", 0))
    if not extracted:  # no worker figures (an older run): its rejected pages, from the dead letters
        rejected = int(failures.get("record rejected", 0))
        extracted = stored + rejected if rejected else 0
    return {
        "records_extracted": extracted, "records_rejected": rejected, "tasks_reached": reached,
        "tasks_dead_unreached": max(0, failed - (reached - stored)),
        "rejections": by_attribute_and_rule(figures, "rejected"),
        "value_problems": by_attribute_and_rule(figures, "problem"),
        "shares": {"stored": _share(stored, reached), "rejected": _share(rejected, extracted),
                   "dead": _share(max(0, failed - (reached - stored)), stored + failed)},
    }


def _percent(share: float) -> str:
    return f"{share * 100:.0f} %" if share >= 0.01 or share == 0 else f"{share * 100:.1f} %"


def _rejection_reason(report: Mapping[str, Any], unit: str) -> str:
    extracted = report["records_extracted"]
    pairs = sorted(((count, attribute, rule) for attribute, rules in report["rejections"].items()
                    for rule, count in rules.items()), reverse=True)
    named = ", ".join(f"{attribute} {rule} on {count} of {extracted}" for count, attribute, rule in
                      pairs[:REASONS_NAMED])
    return f"{_percent(report['shares']['rejected'])} of {unit} rejected" + (f": {named}" if named else "")


def assess_quality(report: Mapping[str, Any], quality: Quality, unit: str = "pages") -> dict[str, Any]:
    """The report's ``quality`` section: outcome (green, degraded, failed), the breaches and the reason in one
    line. ``report`` holds :func:`quality_figures` and the run's other figures."""
    shares = report["shares"]
    breaches: list[dict[str, Any]] = []

    def breach(threshold: str, value: float | int, limit: float | int, reason: str) -> None:
        breaches.append({"threshold": threshold, "value": value, "limit": limit, "reason": reason})

    if shares["rejected"] is not None and shares["rejected"] > quality.max_rejected_share:
        breach("max_rejected_share", shares["rejected"], quality.max_rejected_share, _rejection_reason(report, unit)
               + f" (at most {_percent(quality.max_rejected_share)} allowed)")
    if shares["stored"] is not None and shares["stored"] < quality.min_stored_share:
        breach("min_stored_share", shares["stored"], quality.min_stored_share,
               f"{_percent(shares['stored'])} of the pages that answered were stored "
               f"({report.get('tasks_stored', 0)} of {report['tasks_reached']}; at least "
               f"{_percent(quality.min_stored_share)} wanted)")
    if shares["dead"] is not None and shares["dead"] > quality.max_dead_share:
        failures = {reason: count for reason, count in (report.get("failures_by_reason") or {}).items()
                    if reason not in REACHED_PAGE_REASONS}
        top = ", ".join(f"{reason} {count}" for reason, count in
                        sorted(failures.items(), key=lambda item: -item[1])[:REASONS_NAMED])
        breach("max_dead_share", shares["dead"], quality.max_dead_share,
               f"{_percent(shares['dead'])} of tasks dead-lettered unanswered ({report['tasks_dead_unreached']}"
               f"{': ' + top if top else ''}; at most {_percent(quality.max_dead_share)} allowed)")
    still_blocked = int((report.get("failures_by_reason") or {}).get("blocked", 0))
    if still_blocked:  # items the site never let us read: their stored values are old, whatever the shares say
        breach("blocked", still_blocked, 0, f"{still_blocked} pages stayed blocked past their retries (the site's "
               f"block never lifted; {report.get('pages_blocked', 0)} block pages met)")
    stored = int(report.get("records_stored", 0))
    if stored < quality.min_records:
        breach("min_records", stored, quality.min_records,
               f"{stored} records stored, fewer than the {quality.min_records} wanted")
    drift = list(report.get("selector_drift") or [])
    if breaches:
        outcome = FAILED if quality.on_breach == "fail" else DEGRADED
        reason = "; ".join(entry["reason"] for entry in breaches)
    elif drift:
        outcome, reason = DEGRADED, f"selector drift: {', '.join(drift)}"
    else:
        outcome, reason = GREEN, ""
    if breaches and drift:
        reason += f"; selector drift: {', '.join(drift)}"
    return {"outcome": outcome, "reason": reason, "breached": bool(breaches), "breaches": breaches,
            "on_breach": quality.on_breach, "thresholds": quality.model_dump()}


@redis_storage_errors()
def publish_run_quality(client: redis.Redis, source: str, report: Mapping[str, Any]) -> None:
    """The last reported run's outcome and shares in Redis, where the metrics collector and the page read it."""
    quality = report.get("quality") or {}
    shares = report.get("shares") or {}
    fields = {"run_id": str(report.get("run_id", "")), "outcome": quality.get("outcome", GREEN),
              "reason": quality.get("reason", ""), "breached": "1" if quality.get("breached") else "0",
              "on_breach": quality.get("on_breach", "fail"), "finished_at": str(report.get("finished_at", "")),
              "shares": json.dumps(shares)}
    client.hset(SourceKeys(source).run_quality, mapping=fields)
