"""A record's life cycle in the output: gone (``gone_at``, ``gone_reason``), back, and moved by a redirect.

A record whose page says its item is gone keeps its last values and gets ``gone_at`` (the first time it was
found gone: "gone since") and ``gone_reason``; the next write of the record (the item is found again) clears
both (:class:`~harvester.storage.data_handler.DataHandler` unsets them on every upsert). A URL with no record
cannot be marked: the caller decides what such a page is (a dead letter: nothing was ever stored for it).

A redirect that stays on the item stores its record under the final URL. When the record still sits under the
URL that was asked for, it is moved there (its ``url`` changes, the old one joins ``requested_urls``), so one
item stays one record; when a record of ANOTHER item is already stored under the final URL (one the old URL
was never an alias of), the redirect left the item: the old record is gone, the other is not touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pymongo
from pymongo.collection import Collection

GONE_AT = "gone_at"
GONE_REASON = "gone_reason"
REQUESTED_URLS = "requested_urls"
CONFIG_VERSION = "config_version"
MAX_REASON_LENGTH = 300


def gone_filter(gone: bool | None) -> dict[str, Any]:
    """The query part that keeps gone records (True), the others (False), or all (None): records, exports and
    the results API filter with it."""
    if gone is None:
        return {}
    return {GONE_AT: {"$ne": None}} if gone else {GONE_AT: None}


@dataclass
class GoneMarks:
    """What marking a batch's gone pages did, by URL."""

    marked: list[str] = field(default_factory=list)  # records found gone now (``gone_at`` set)
    still_gone: list[str] = field(default_factory=list)  # records gone already: their ``gone_at`` stays
    unknown: list[str] = field(default_factory=list)  # no record under that URL


def mark_gone(collection: Collection, reasons: dict[str, str], now: datetime) -> GoneMarks:
    """Set ``gone_at`` (unless set) and ``gone_reason`` on the records of these URLs: one find, one bulk write."""
    marks = GoneMarks()
    if not reasons:
        return marks
    stored: dict[str, Any] = {}
    for document in collection.find({"url": {"$in": list(reasons)}}, {"_id": 0, "url": 1, GONE_AT: 1}):
        if stored.get(document["url"]) is None:  # several records may share a URL: one not gone decides
            stored[document["url"]] = document.get(GONE_AT)
    operations = []
    for url, reason in reasons.items():
        if url not in stored:
            marks.unknown.append(url)
            continue
        (marks.marked if stored[url] is None else marks.still_gone).append(url)
        operations.append(pymongo.UpdateMany({"url": url, GONE_AT: None},
                                             {"$set": {GONE_AT: now, GONE_REASON: reason[:MAX_REASON_LENGTH]}}))
    if operations:
        collection.bulk_write(operations, ordered=False)
    return marks


def settle_redirects(collection: Collection, moves: dict[str, str], url_is_key: bool) -> dict[str, str]:
    """For redirects that stayed on their item (requested URL -> final URL): the requested URLs whose redirect
    led to ANOTHER item's record (the reason, by requested URL), after moving the records still stored under a
    requested URL to their final one (when ``url`` is part of the output key: else the upsert finds them by key)."""
    if not moves:
        return {}
    stored = {document["url"]: document.get(REQUESTED_URLS) or []
              for document in collection.find({"url": {"$in": [*moves, *moves.values()]}},
                                               {"_id": 0, "url": 1, REQUESTED_URLS: 1})}
    left: dict[str, str] = {}
    renames = []
    for requested, final in moves.items():
        if requested not in stored:
            continue  # nothing stored under the old URL: the write stores (or refreshes) the final one
        if final in stored:
            if requested not in stored[final]:
                left[requested] = f"redirected to another item's page {final}"
            continue
        if url_is_key:
            renames.append(pymongo.UpdateMany({"url": requested},
                                              {"$set": {"url": final}, "$addToSet": {REQUESTED_URLS: requested}}))
    if renames:
        collection.bulk_write(renames, ordered=False)
    return left
