"""Packages: the resumable unit of a producer run (DESIGN.md section 6, seed 001).

One MongoDB document per package ``{source, run_id, package_id, status, urls, pending, done, failed}``
with a unique index on (source, run_id, package_id), so creating packages twice is harmless.
Status 0 waiting, -1 running, 1 finished. Every method is one or two single-document atomic
operations (no multi-document transactions: the MongoDB stand-in is slow and they are not needed).

``urls`` (with the package's ``kind`` and ``depth``) holds the planned pages, so a package can be pushed
again after a crash; their task ids are derived from (source, run, package, url). Arrays of plain
strings, not of sub-documents: the MongoDB stand-in rewrites a whole document per update, and
sub-document arrays made claims and count-downs about five times slower. ``pending`` holds the ids
still to store, including detail tasks discovered on listing pages (added by workers with
:meth:`PackageStore.add_tasks` BEFORE they are pushed, so a package never looks finished while
discovered work is in flight).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any

from pymongo import ASCENDING, ReturnDocument, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError

from harvester.errors import MONGO_DUPLICATE_KEY, mongo_storage_errors

PACKAGES_COLLECTION = "packages"


class PackageStatus(IntEnum):
    """The seed's three states, stored as the same integers."""

    WAITING = 0
    RUNNING = -1
    FINISHED = 1


def planned_task_id(source: str, run_id: str, package_id: int, url: str) -> str:
    """Deterministic id of a planned task: re-planning or re-pushing a package reuses the same ids,
    so a late duplicate delivery counts down the same pending entry instead of a phantom one."""
    digest = hashlib.sha1(f"{source}\x1f{run_id}\x1f{package_id}\x1f{url}".encode(), usedforsecurity=False)
    return digest.hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class PackageTask:
    """A planned page with its kind and depth, for callers that build packages by hand (tests, tools).

    The planner passes plain URL strings; both forms make the same document.
    """

    task_id: str
    url: str
    kind: str = "details"
    depth: int = 0


def _now() -> datetime:
    return datetime.now(UTC)


class PackageStore:
    """The ``packages`` collection: create, claim, count down, finish, and reset after a crash."""

    def __init__(self, database: Database) -> None:
        self.collection: Collection = database[PACKAGES_COLLECTION]

    @staticmethod
    def _key(source: str, run_id: str, package_id: int) -> dict[str, Any]:
        return {"source": source, "run_id": run_id, "package_id": int(package_id)}

    @mongo_storage_errors()
    def ensure_indexes(self) -> None:
        """The unique index makes package creation idempotent; the status index serves claims."""
        self.collection.create_index(
            [("source", ASCENDING), ("run_id", ASCENDING), ("package_id", ASCENDING)],
            unique=True, name="source_run_package",
        )
        self.collection.create_index(
            [("source", ASCENDING), ("run_id", ASCENDING), ("status", ASCENDING)], name="source_run_status"
        )

    # Planning -------------------------------------------------------------------------------

    @mongo_storage_errors()
    def create_packages(self, source: str, run_id: str, packages: Iterable[tuple[int, list[str] | list[PackageTask]]],
                        kind: str = "details", depth: int = 0, refetch: bool = False) -> int:
        """Insert waiting packages of URLs; ones that already exist (same source, run, id) are left untouched.

        Returns how many were new. Idempotent through the unique index, so a planner that died
        half-way can simply run again. Entries may be URLs (of ``kind`` and ``depth``) or PackageTasks.
        ``refetch``: pages a manual trigger named, fetched without conditional requests.
        """
        now = _now()
        documents = []
        for package_id, entries in packages:
            package_kind, package_depth = kind, depth
            tasks = [entry for entry in entries if isinstance(entry, PackageTask)]
            if tasks:
                package_kind, package_depth = tasks[0].kind, tasks[0].depth
                urls = [task.url for task in tasks]
                pending = [task.task_id for task in tasks]
            else:
                urls = [entry for entry in entries if isinstance(entry, str)]
                pending = [planned_task_id(source, run_id, package_id, url) for url in urls]
            documents.append({
                **self._key(source, run_id, package_id),
                "status": int(PackageStatus.WAITING),
                "kind": package_kind,
                "depth": package_depth,
                **({"refetch": True} if refetch else {}),
                "urls": urls,
                "pending": pending,
                "done": [],
                "failed": [],
                "discovered": 0,
                "claims": 0,
                "created_at": now,
                "updated_at": now,
            })
        if not documents:
            return 0
        try:
            result = self.collection.insert_many(documents, ordered=False)
            return len(result.inserted_ids)
        except BulkWriteError as error:
            details = error.details
            if any(item.get("code") != MONGO_DUPLICATE_KEY for item in details.get("writeErrors", [])):
                raise
            return int(details.get("nInserted", 0))

    @mongo_storage_errors()
    def last_package_id(self, source: str, run_id: str) -> int | None:
        document = self.collection.find_one(
            {"source": source, "run_id": run_id}, {"package_id": 1}, sort=[("package_id", -1)]
        )
        return None if document is None else int(document["package_id"])

    @mongo_storage_errors()
    def planned_urls(self, source: str, run_id: str) -> set[str]:
        """URLs already planned in this run (bounded by the batch limit), to continue a half-done plan."""
        urls: set[str] = set()
        for document in self.collection.find({"source": source, "run_id": run_id}, {"urls": 1}):
            urls.update(document.get("urls", []))
        return urls

    # Producing ------------------------------------------------------------------------------

    @mongo_storage_errors()
    def claim(self, source: str, run_id: str, limit: int) -> list[dict[str, Any]]:
        """Claim up to ``limit`` waiting packages (waiting -> running), atomically per package.

        Two producers never get the same package: each marks candidates with its own claim token in
        one ``update_many`` whose filter still requires status waiting, then reads back what it won.
        """
        candidates = [
            document["_id"]
            for document in self.collection.find(
                {"source": source, "run_id": run_id, "status": int(PackageStatus.WAITING)},
                {"_id": 1}, sort=[("package_id", ASCENDING)], limit=limit,
            )
        ]
        if not candidates:
            return []
        token = uuid.uuid4().hex
        self.collection.update_many(
            {"_id": {"$in": candidates}, "status": int(PackageStatus.WAITING)},
            {"$set": {"status": int(PackageStatus.RUNNING), "claim": token, "claimed_at": _now(),
                      "updated_at": _now()},
             "$inc": {"claims": 1}},
        )
        projection = {"package_id": 1, "urls": 1, "kind": 1, "depth": 1, "pending": 1, "discovered": 1, "claim": 1,
                      "refetch": 1}
        won = self.collection.find({"_id": {"$in": candidates}, "claim": token}, projection)
        return list(won.sort("package_id", 1))

    # Called by workers ----------------------------------------------------------------------

    @mongo_storage_errors()
    def add_tasks(self, source: str, run_id: str, package_id: int, task_ids: list[str]) -> None:
        """Record discovered tasks as pending before they are pushed (so the package stays open).

        Ids already stored or failed are not re-added (a listing page delivered twice must not
        re-open work that is done). A finished package that gets new work goes back to running.
        """
        if not task_ids:
            return
        key = self._key(source, run_id, package_id)
        document = self.collection.find_one(key, {"done": 1, "failed": 1})
        if document is None:
            return
        settled = set(document.get("done", [])) | set(document.get("failed", []))
        new_ids = [task_id for task_id in dict.fromkeys(task_ids) if task_id not in settled]
        if not new_ids:
            return
        self.collection.update_one(
            key, {"$addToSet": {"pending": {"$each": new_ids}}, "$inc": {"discovered": len(new_ids)},
                  "$set": {"updated_at": _now()}},
        )
        self.collection.update_one(
            {**key, "status": int(PackageStatus.FINISHED), "pending.0": {"$exists": True}},
            {"$set": {"status": int(PackageStatus.RUNNING)}, "$unset": {"finished_at": ""}},
        )

    @mongo_storage_errors()
    def complete_tasks(
        self, source: str, run_id: str, package_id: int, task_ids: list[str], failed: bool = False
    ) -> bool:
        """Count tasks down (stored, or dead-lettered when ``failed``); True when the package just finished.

        Idempotent: completing a task twice changes nothing, and only one caller ever sees True.
        """
        if not task_ids:
            return False
        key = self._key(source, run_id, package_id)
        ids = list(dict.fromkeys(task_ids))
        if failed:
            update: dict[str, Any] = {"$pull": {"pending": {"$in": ids}}, "$addToSet": {"failed": {"$each": ids}}}
        else:
            update = {"$pull": {"pending": {"$in": ids}, "failed": {"$in": ids}}, "$addToSet": {"done": {"$each": ids}}}
        update["$set"] = {"updated_at": _now()}
        # One round trip while the package still has work: the count-down answers what is left, and only the
        # count-down that empties it sends the (conditional, so once only) finishing update.
        after = self.collection.find_one_and_update(key, update, projection={"_id": 0, "pending": 1, "status": 1},
                                                    return_document=ReturnDocument.AFTER)
        if after is None or after.get("pending") or after.get("status") == int(PackageStatus.FINISHED):
            return False
        return self._finish_if_empty(key)

    def _finish_if_empty(self, key: dict[str, Any]) -> bool:
        result = self.collection.update_one(
            {**key, "pending": {"$size": 0}, "status": {"$ne": int(PackageStatus.FINISHED)}},
            {"$set": {"status": int(PackageStatus.FINISHED), "finished_at": _now()}},
        )
        return result.modified_count == 1

    # Resume ---------------------------------------------------------------------------------

    def running(self, source: str, run_id: str) -> Iterator[dict[str, Any]]:
        yield from self.collection.find(
            {"source": source, "run_id": run_id, "status": int(PackageStatus.RUNNING)},
            {"package_id": 1, "pending": 1, "urls": 1, "claim": 1, "kind": 1, "depth": 1, "refetch": 1},
        )  # kind, depth and refetch: a half-pushed package's messages are made from this read

    @mongo_storage_errors()
    def reset_to_waiting(self, source: str, run_id: str, package_id: int, claim: str | None,
                         lost_ids: list[str], repush_ids: list[str] | None = None) -> bool:
        """Put a stale running package back to waiting (only if nobody re-claimed it meanwhile).

        ``lost_ids`` are discovered tasks that are gone from Redis; the package keeps only planned
        URLs, so they cannot be rebuilt here: they leave ``pending`` (counted in ``lost``, not as
        failed, so :meth:`add_tasks` takes them again). ``repush_ids`` are planned tasks to push
        again although stored already: the listing pages that discover them once more.
        """
        key = self._key(source, run_id, package_id)
        update: dict[str, Any] = {"$set": {"status": int(PackageStatus.WAITING), "updated_at": _now()},
                                  "$unset": {"claim": ""}}
        if lost_ids:
            update["$pull"] = {"pending": {"$in": lost_ids}}
            update["$inc"] = {"lost": len(lost_ids)}
        result = self.collection.update_one(
            {**key, "status": int(PackageStatus.RUNNING), "claim": claim}, update
        )
        if not result.modified_count:
            return False
        if repush_ids:
            self.collection.update_one(
                {**key, "status": int(PackageStatus.WAITING)},
                {"$addToSet": {"pending": {"$each": repush_ids}}, "$pull": {"done": {"$in": repush_ids}}},
            )
        self._finish_if_empty(key)  # nothing left to push: it is finished, not waiting
        return True

    @mongo_storage_errors()
    def finish_empty(self, source: str, run_id: str) -> int:
        """Finish packages with nothing pending (a count-down that died between its two updates)."""
        result = self.collection.update_many(
            {"source": source, "run_id": run_id, "pending": {"$size": 0},
             "status": {"$ne": int(PackageStatus.FINISHED)}},
            {"$set": {"status": int(PackageStatus.FINISHED), "finished_at": _now()}},
        )
        return result.modified_count

    @mongo_storage_errors()
    def settle_dead(self, source: str, run_id: str, dead_by_package: dict[int, set[str]]) -> int:
        """Count dead-lettered tasks that are still pending as failed, in one bulk write.

        Returns the packages touched. Called every poll by the sensor's trigger, so tasks already
        settled cost one read, no write.
        """
        if not dead_by_package:
            return 0
        still_pending: dict[int, list[str]] = {}
        for document in self.collection.find(
            {"source": source, "run_id": run_id, "package_id": {"$in": [int(p) for p in dead_by_package]},
             "status": {"$ne": int(PackageStatus.FINISHED)}},
            {"package_id": 1, "pending": 1},
        ):
            pending = set(document.get("pending", []))
            if ids := sorted(pending & dead_by_package.get(int(document["package_id"]), set())):
                still_pending[int(document["package_id"])] = ids
        operations = [
            UpdateOne(self._key(source, run_id, package_id),
                      {"$pull": {"pending": {"$in": ids}}, "$addToSet": {"failed": {"$each": ids}},
                       "$set": {"updated_at": _now()}})
            for package_id, ids in still_pending.items()
        ]
        if not operations:
            return 0
        self.collection.bulk_write(operations, ordered=False)
        for package_id in still_pending:
            self._finish_if_empty(self._key(source, run_id, package_id))
        return len(operations)

    # Figures --------------------------------------------------------------------------------

    @mongo_storage_errors()
    def summary(self, source: str, run_id: str) -> tuple[dict[PackageStatus, int], dict[str, int]]:
        """Packages per status and task totals of a run, in one server-side aggregation.

        (Summed on the server: reading every package's id arrays each poll would move them all.)
        """
        statuses = dict.fromkeys(PackageStatus, 0)
        totals = {"planned": 0, "discovered": 0, "pending": 0, "done": 0, "failed": 0, "lost": 0}
        pipeline = [
            {"$match": {"source": source, "run_id": run_id}},
            {"$group": {
                "_id": "$status", "packages": {"$sum": 1},
                "planned": {"$sum": {"$size": {"$ifNull": ["$urls", []]}}},
                "pending": {"$sum": {"$size": {"$ifNull": ["$pending", []]}}},
                "done": {"$sum": {"$size": {"$ifNull": ["$done", []]}}},
                "failed": {"$sum": {"$size": {"$ifNull": ["$failed", []]}}},
                "discovered": {"$sum": {"$ifNull": ["$discovered", 0]}},
                "lost": {"$sum": {"$ifNull": ["$lost", 0]}},
            }},
        ]
        for group in self.collection.aggregate(pipeline):
            statuses[PackageStatus(int(group["_id"]))] = int(group["packages"])
            for name in totals:
                totals[name] += int(group[name])
        return statuses, totals

    @mongo_storage_errors()
    def status_counts(self, source: str, run_id: str) -> dict[PackageStatus, int]:
        return self.summary(source, run_id)[0]

    @mongo_storage_errors()
    def task_counts(self, source: str, run_id: str) -> dict[str, int]:
        """Planned, discovered, pending, done and failed tasks of a run, summed over its packages."""
        return self.summary(source, run_id)[1]
