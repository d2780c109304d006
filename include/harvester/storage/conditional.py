"""Conditional requests (no body when unchanged): the validators a record was fetched with, and what a 304 changes.

A detail page's ETag and Last-Modified are stored with its record (``_http``: ``etag``, ``last_modified``,
``bytes`` of the body they describe), so the next visit can send If-None-Match / If-Modified-Since.
A 304 keeps the record as it is and refreshes ``harvested_at`` and ``run_id`` (the page was harvested
again, by this run), and ``_http.not_modified_at`` (which the run's report counts), in ONE
``update_many`` per batch. A site that sends no validators gets no conditional headers: nothing is
stored, nothing extra is sent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo.collection import Collection

HTTP_FIELD = "_http"


def validators_of(etag: str, last_modified: str, size: int) -> dict[str, Any] | None:
    """What a record keeps of its response, or None when the site sent no validator."""
    if not etag and not last_modified:
        return None
    kept: dict[str, Any] = {"bytes": size}
    if etag:
        kept["etag"] = etag[:512]
    if last_modified:
        kept["last_modified"] = last_modified[:128]
    return kept


def conditional_headers(validators: dict[str, Any] | None) -> dict[str, str]:
    """If-None-Match and If-Modified-Since for a stored record's validators (none: an empty dict)."""
    if not validators:
        return {}
    headers = {}
    if validators.get("etag"):
        headers["If-None-Match"] = str(validators["etag"])
    if validators.get("last_modified"):
        headers["If-Modified-Since"] = str(validators["last_modified"])
    return headers


def stored_validators(collection: Collection, urls: list[str], config_version: str | None = None
                      ) -> dict[str, dict[str, Any]]:
    """URL -> its record's validators, for the URLs whose record has some (one query); with
    ``config_version``, only records that version extracted (a record of an older config, or of none, is
    fetched in full so the current selectors read it)."""
    found: dict[str, dict[str, Any]] = {}
    query: dict[str, Any] = {"url": {"$in": urls}, HTTP_FIELD: {"$exists": True}}
    if config_version is not None:
        query["config_version"] = config_version
    for document in collection.find(query, {"_id": 0, "url": 1, HTTP_FIELD: 1}):
        if isinstance(document.get(HTTP_FIELD), dict):
            found[document["url"]] = document[HTTP_FIELD]
    return found


def refresh_not_modified(collection: Collection, urls: list[str], run_id: str | None, now: datetime) -> int:
    """Harvested again, unchanged: ``harvested_at``, ``run_id`` and ``_http.not_modified_at`` set."""
    result = collection.update_many(
        {"url": {"$in": urls}},
        {"$set": {"harvested_at": now, "run_id": run_id, f"{HTTP_FIELD}.not_modified_at": now},
         "$unset": {"gone_at": "", "gone_reason": ""}})  # the page answers for its item again
    return result.matched_count
