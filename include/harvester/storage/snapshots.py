"""Evidence of failed and rejected browser pages (DESIGN.md section 11): the page's HTML and a screenshot.

A dead letter says why a task failed; its snapshot shows what the page looked like then. One document per
(source, task) in the ``page_snapshots`` collection of the Harvester database, the latest attempt's, found by
the dead letter's task id (``harvester dead-letters show``, the Harvester page's dead-letter list). Bounded:
``browser_snapshot_max_bytes`` per snapshot (the screenshot kept when it fits, the HTML cut to what is left),
and kept ``browser_snapshot_keep_days`` (a TTL index where the server has one, and a purge of the expired
with every write, so the embedded stand-in forgets them too). Bounded as a whole too: a run keeps at most
``evidence_max_pages_per_run`` snapshots and ``evidence_max_bytes_per_run`` bytes, a source at most
``evidence_max_pages_per_source`` and ``evidence_max_bytes_per_source`` at once (a 10,000-page run of
rejections kept 19.5 GiB for 7 days); what does not fit is not kept, and :class:`SavedEvidence` says how many.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bson.binary import Binary
from pymongo import ASCENDING, ReplaceOne
from pymongo.collection import Collection
from pymongo.database import Database

from harvester.errors import mongo_storage_errors
from harvester.settings import HarvesterSettings

SNAPSHOTS_COLLECTION = "page_snapshots"
PURGE_EVERY_SECONDS = 60.0  # expired snapshots are purged at most this often per process


@dataclass(frozen=True)
class PageSnapshot:
    source: str
    task_id: str
    url: str
    reason: str
    html: str
    screenshot: bytes | None
    taken_at: datetime

    @property
    def id(self) -> str:
        return snapshot_id(self.source, self.task_id)


@dataclass(frozen=True)
class PageEvidence:
    """A page to keep as evidence of its task's failure (what :meth:`SnapshotStore.save_many` takes)."""

    task_id: str
    url: str
    reason: str
    html: str
    screenshot: bytes | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class EvidenceCaps:
    """How much evidence a run and a source keep (the ``evidence_*`` settings)."""

    pages_per_run: int = 500
    bytes_per_run: int = 256 * 1024 * 1024
    pages_per_source: int = 2000
    bytes_per_source: int = 1024 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> EvidenceCaps:
        return cls(settings.evidence_max_pages_per_run, settings.evidence_max_bytes_per_run,
                   settings.evidence_max_pages_per_source, settings.evidence_max_bytes_per_source)


class SavedEvidence(list[str]):
    """The ids of the snapshots kept; ``not_kept`` counts the pages a cap left out."""

    not_kept: int = 0


def snapshot_id(source: str, task_id: str) -> str:
    return f"{source}|{task_id}"


def bounded(html: str, screenshot: bytes | None, max_bytes: int) -> tuple[str, bytes | None]:
    """What fits in ``max_bytes``: the screenshot if it fits (it shows most), the HTML cut to the rest."""
    if screenshot is not None and len(screenshot) > max_bytes // 2:
        screenshot = None  # a screenshot bigger than half the budget would leave no room for the HTML
    room = max_bytes - (len(screenshot) if screenshot is not None else 0)
    encoded = html.encode()
    if len(encoded) > room:
        html = encoded[:room].decode(errors="ignore")
    return html, screenshot


class SnapshotStore:
    """Save, find and expire page snapshots."""

    def __init__(self, database: Database, keep_days: float = 7.0, max_bytes: int = 2 << 20,
                 caps: EvidenceCaps | None = None) -> None:
        self.collection: Collection = database[SNAPSHOTS_COLLECTION]
        self.keep = timedelta(days=keep_days)
        self.max_bytes = max_bytes
        self.caps = caps or EvidenceCaps()
        self._purged_at = float("-inf")
        self._indexed = False

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> SnapshotStore:
        from harvester.connections import MONGO_DEFAULT, mongo_client

        database = mongo_client(MONGO_DEFAULT, settings=settings)[settings.mongo_database]
        return cls(database, settings.browser_snapshot_keep_days, settings.browser_snapshot_max_bytes,
                   EvidenceCaps.from_settings(settings))

    def save(self, source: str, task_id: str, url: str, reason: str, html: str, screenshot: bytes | None,
             now: datetime | None = None, run_id: str | None = None) -> str | None:
        """Keep (or replace) the snapshot of a task; returns its id, None when a cap left it out."""
        saved = self.save_many(source, [PageEvidence(task_id, url, reason, html, screenshot, run_id)], now)
        return saved[0] if saved else None

    @mongo_storage_errors()
    def save_many(self, source: str, pages: list[PageEvidence], now: datetime | None = None) -> SavedEvidence:
        """Keep (or replace) the snapshots of several tasks of a source in one bulk write (a batch's rejected
        pages), as many as the run's and the source's caps leave room for; returns the ids kept."""
        saved = SavedEvidence()
        if not pages:
            return saved
        now = now or datetime.now(UTC)
        self._ensure_index()
        self._purge(now)
        room = _Room(self, source, now)
        writes = []
        for page in pages:
            html, screenshot = bounded(page.html, page.screenshot, self.max_bytes)
            size = len(html.encode()) + (len(screenshot) if screenshot is not None else 0)
            identifier = snapshot_id(source, page.task_id)
            if not room.take(page.run_id, identifier, size):
                saved.not_kept += 1
                continue
            saved.append(identifier)
            writes.append(ReplaceOne({"_id": identifier}, {
                "_id": identifier, "source": source, "task_id": page.task_id, "url": page.url,
                "reason": page.reason[:2000], "html": html, "run_id": page.run_id, "bytes": size,
                "screenshot": Binary(screenshot) if screenshot is not None else None,
                "taken_at": now, "expires_at": now + self.keep}, upsert=True))
        if writes:
            self.collection.bulk_write(writes, ordered=False)
        return saved

    @mongo_storage_errors()
    def get(self, source: str, task_id: str, now: datetime | None = None) -> PageSnapshot | None:
        document = self.collection.find_one({"_id": snapshot_id(source, task_id)})
        if document is None or _aware(document["expires_at"]) <= (now or datetime.now(UTC)):
            return None
        screenshot = document.get("screenshot")
        return PageSnapshot(document["source"], document["task_id"], document.get("url", ""),
                            document.get("reason", ""), document.get("html", ""),
                            bytes(screenshot) if screenshot is not None else None, _aware(document["taken_at"]))

    @mongo_storage_errors()
    def existing(self, source: str, task_ids: list[str], now: datetime | None = None) -> set[str]:
        """Which of ``task_ids`` have a snapshot (one query: a dead-letter page marks the ones that do)."""
        if not task_ids:
            return set()
        cursor = self.collection.find(
            {"_id": {"$in": [snapshot_id(source, task_id) for task_id in task_ids]},
             "expires_at": {"$gt": now or datetime.now(UTC)}}, {"task_id": 1})
        return {document["task_id"] for document in cursor}

    def _ensure_index(self) -> None:
        if not self._indexed:
            self.collection.create_index([("expires_at", ASCENDING)], expireAfterSeconds=0, name="expires")
            self._indexed = True

    def usage(self, match: dict, now: datetime) -> tuple[int, int]:
        """(snapshots, bytes) of the live evidence ``match`` selects, as MongoDB sums them."""
        rows = list(self.collection.aggregate([
            {"$match": {**match, "expires_at": {"$gt": now}}},
            {"$group": {"_id": None, "count": {"$sum": 1}, "bytes": {"$sum": {"$ifNull": ["$bytes", 0]}}}}]))
        return (int(rows[0]["count"]), int(rows[0]["bytes"])) if rows else (0, 0)

    def _purge(self, now: datetime) -> None:
        if time.monotonic() - self._purged_at < PURGE_EVERY_SECONDS:
            return
        self._purged_at = time.monotonic()
        self.collection.delete_many({"expires_at": {"$lte": now}})


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class _Room:
    """What is left under the caps for one write: the source's live evidence and each run's, read once, then
    counted down as pages are taken (a task's snapshot replaced counts once)."""

    def __init__(self, store: SnapshotStore, source: str, now: datetime) -> None:
        self.store, self.source, self.now = store, source, now
        self.source_used = list(store.usage({"source": source}, now))
        self.runs: dict[str | None, list[int]] = {}
        self.replaced = {document["_id"] for document in store.collection.find({"source": source}, {"_id": 1})}

    def take(self, run_id: str | None, identifier: str, size: int) -> bool:
        caps = self.store.caps
        if identifier in self.replaced:  # the latest attempt replaces its task's snapshot: no new room needed
            return True
        if run_id not in self.runs:
            self.runs[run_id] = list(self.store.usage({"source": self.source, "run_id": run_id}, self.now))
        run = self.runs[run_id]
        if (self.source_used[0] + 1 > caps.pages_per_source or self.source_used[1] + size > caps.bytes_per_source
                or run[0] + 1 > caps.pages_per_run or run[1] + size > caps.bytes_per_run):
            return False
        for used in (self.source_used, run):
            used[0] += 1
            used[1] += size
        self.replaced.add(identifier)
        return True
