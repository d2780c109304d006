"""The data handler: a batch of records written with ONE ``bulk_write`` of upserts (DESIGN.md section 6).

Upserts are keyed by the source's ``output.key`` fields under a unique index, so a retried task (at
least once delivery) rewrites the same document instead of adding one. ``$setOnInsert`` keeps the
first time a record was seen; ``$set`` carries the data, the harvest time and the run.
With ``settings.output_sink == "discard"`` nothing is written (dry runs and the crawl-only bench).

A record that cannot be written never fails its batch-mates: when pymongo cannot encode a batch
(an int above 2**63, a NUL in a key) the records that cannot be encoded are found one by one and the
rest is sent; when the server refuses some writes (``BulkWriteError`` names each by index; an
unordered bulk has written the others) those records are rejected with MongoDB's reason.
A duplicate-key error (two workers upserting one new key at once) is retried once, not rejected.

A record whose every non-key attribute is empty (a page that gave nothing but its key: a challenge page that
answered 200 and slipped past the block markers, a render that never came) is only ever inserted
(``$setOnInsert``): it never writes over a stored record, so a good stored price is never replaced by null.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import bson
import pymongo
from bson.errors import BSONError
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError, DocumentTooLarge

from harvester.config import SourceConfig
from harvester.connections import mongo_client
from harvester.errors import MONGO_DUPLICATE_KEY, mongo_storage_errors
from harvester.settings import HarvesterSettings
from harvester.storage.lifecycle import CONFIG_VERSION, GONE_AT, GONE_REASON, REQUESTED_URLS, GoneMarks
from harvester.storage.output_codec import OUTPUT_CODEC, OUTPUT_TYPES

KEY_INDEX_NAME = "harvester_output_key"
URL_INDEX_NAME = "harvester_url"
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


# What pymongo raises while encoding a batch, before anything is sent, when one document is unstorable.
ENCODING_ERRORS = (BSONError, DocumentTooLarge, OverflowError, UnicodeError, ValueError, TypeError)


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, list | dict) and not value)


def is_empty_record(source: SourceConfig, record: dict[str, Any]) -> bool:
    """Whether every non-key attribute of ``record`` is empty: what a page with none of the item's data gives.
    A source with no attribute beside its key never has empty records (its key is all it stores)."""
    names = [name for name in source.attributes if name not in source.output.key]
    return bool(names) and all(_is_empty(record.get(name)) for name in names)


@dataclass
class _Upsert:
    """One upsert and the positions (in the batch) of the records it stands for; ``insert_only``: an empty
    record, written only where nothing is stored under its key."""

    filter: dict[str, Any]
    update: dict[str, Any]
    positions: list[int]
    insert_only: bool = False

    def operation(self) -> pymongo.UpdateOne:
        return pymongo.UpdateOne(self.filter, self.update, upsert=True)


@dataclass
class WriteResult:
    """Counts of one batch; ``rejected`` maps a record's position to why it could not be keyed."""

    upserted: int = 0
    modified: int = 0
    matched: int = 0
    discarded: int = 0
    rejected: dict[int, str] = field(default_factory=dict)
    # what the records' stored versions say: new, changed (some field differs) or the same
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    back: int = 0  # records that were gone and were found again (their ``gone_at`` cleared)
    empty_kept: int = 0  # records with every non-key attribute empty that met a stored one and left it as it was

    @property
    def stored(self) -> int:
        return self.upserted + self.matched + self.discarded


class DataHandler:
    """Writes records of one source at a time; builds the output's unique index on first use."""

    _indexed: set[tuple[str, str, str, tuple[str, ...]]] = set()
    _index_lock = threading.Lock()

    def __init__(self, settings: HarvesterSettings, client: pymongo.MongoClient | None = None) -> None:
        self.settings = settings
        self._client = client

    @property
    def discarding(self) -> bool:
        return self.settings.output_sink == "discard"

    def database(self, source: SourceConfig) -> Database:
        """The source's output database on the server its ``output.connection_id`` names."""
        client = self._client or mongo_client(source.output.connection_id, settings=self.settings)
        return client[source.output.database or self.settings.mongo_database]

    @mongo_storage_errors()
    def collection(self, source: SourceConfig) -> Collection:
        database = self.database(source)
        codec = database.codec_options.with_options(type_registry=OUTPUT_TYPES)
        collection = database.get_collection(source.output_collection, codec_options=codec)
        self.ensure_indexes(collection, source)
        return collection

    def ensure_indexes(self, collection: Collection, source: SourceConfig) -> None:
        """The unique key index (the authority against duplicates) and a url index for the URL store.

        No more indexes than that: every index costs each upsert (about 40% on the embedded stand-in).
        """
        address = collection.database.client.address
        marker = (str(address), collection.database.name, collection.name, tuple(source.output.key))
        if marker in self._indexed:
            return
        with self._index_lock:
            if marker in self._indexed:
                return
            collection.create_index([(name, pymongo.ASCENDING) for name in source.output.key],
                                    unique=True, name=KEY_INDEX_NAME)
            if source.output.key[0] != "url":  # the key index already serves url lookups when url leads it
                collection.create_index([("url", pymongo.ASCENDING)], name=URL_INDEX_NAME)
            self._indexed.add(marker)

    def operations(self, source: SourceConfig, records: list[dict[str, Any]], run_id: str | None,
                   now: datetime, result: WriteResult, config_version: str | None = None) -> list[pymongo.UpdateOne]:
        """One upsert per distinct key (the last record of a key wins within a batch)."""
        return [upsert.operation() for upsert in self._upserts(source, records, run_id, now, result, config_version)]

    def _upserts(self, source: SourceConfig, records: list[dict[str, Any]], run_id: str | None,
                 now: datetime, result: WriteResult, config_version: str | None = None) -> list[_Upsert]:
        """A record found again clears ``gone_at`` (``$unset``); the URLs a redirect came from join
        ``requested_urls`` (``$addToSet``: every alias is kept); ``config_version`` names the config that
        extracted the record, so conditional requests are sent only while it is current."""
        by_key: dict[tuple[Any, ...], tuple[dict[str, Any], list[int]]] = {}
        for position, record in enumerate(records):
            key = tuple(record.get(name) for name in source.output.key)
            if any(value is None for value in key):
                missing = [name for name in source.output.key if record.get(name) is None]
                result.rejected[position] = f"output key field(s) missing: {', '.join(missing)}"
                continue
            positions = by_key[key][1] if key in by_key else []  # key fields are scalars (the schema says so)
            by_key[key] = (record, [*positions, position])
        upserts = []
        for record, positions in by_key.values():
            data = {**record, "harvested_at": now, "run_id": run_id}
            requested = data.pop(REQUESTED_URLS, None)
            if config_version:
                data[CONFIG_VERSION] = config_version
            where = {name: record[name] for name in source.output.key}
            if is_empty_record(source, record):
                upserts.append(_Upsert(where, {"$setOnInsert": {**data, "first_seen_at": now}}, positions, True))
                continue
            update: dict[str, Any] = {"$set": data, "$setOnInsert": {"first_seen_at": now},
                                      "$unset": {GONE_AT: "", GONE_REASON: ""}}
            if requested:
                update["$addToSet"] = {REQUESTED_URLS: {"$each": list(requested)}}
            upserts.append(_Upsert(where, update, positions))
        return upserts

    @mongo_storage_errors()
    def write(self, source: SourceConfig, records: list[dict[str, Any]], run_id: str | None = None,
              now: datetime | None = None, config_version: str | None = None) -> WriteResult:
        """Store a batch; records MongoDB cannot store are in ``rejected``, the rest are written.

        Raises StorageError (a PyMongoError too) for the connection or the server as a whole, so the
        caller can retry the whole batch (idempotent).
        """
        result = WriteResult()
        now = now or datetime.now(UTC)
        upserts = self._upserts(source, records, run_id, now, result, config_version)
        if not upserts:
            return result
        if self.discarding:
            result.discarded = len(upserts)
            return result
        collection = self.collection(source)
        self._classify(collection, source, [upsert for upsert in upserts if not upsert.insert_only], run_id, now,
                       result)
        self._bulk_write(collection, upserts, result)
        return result

    @staticmethod
    def _classify(collection: Collection, source: SourceConfig, upserts: list[_Upsert], run_id: str | None,
                  now: datetime, result: WriteResult) -> None:
        """New, changed or unchanged (one read of the stored versions), ``changed_at``, the history."""
        from harvester.storage.changes import ChangeTracker

        changes = ChangeTracker().classify(collection, source, [upsert.update["$set"] for upsert in upserts],
                                           [upsert.filter for upsert in upserts], run_id, now)
        result.new, result.changed, result.unchanged = changes.new, changes.changed, changes.unchanged
        result.back = changes.back

    @mongo_storage_errors()
    def validators(self, source: SourceConfig, urls: list[str], config_version: str | None = None
                   ) -> dict[str, dict[str, Any]]:
        """The ETag / Last-Modified (and body size) last stored with the records of these URLs: one query.
        With ``config_version``, only those of records that version of the config extracted: a 304 keeps a
        record as it is, so one an older config extracted must be fetched in full and extracted again."""
        from harvester.storage.conditional import stored_validators

        if self.discarding or not urls:
            return {}
        return stored_validators(self.collection(source), urls, config_version)

    @mongo_storage_errors()
    def mark_gone(self, source: SourceConfig, reasons: dict[str, str], now: datetime | None = None) -> GoneMarks:
        """The records of these URLs are gone (URL -> why): ``gone_at`` and ``gone_reason`` set, values kept."""
        from harvester.storage.lifecycle import mark_gone

        if self.discarding or not reasons:
            return GoneMarks(marked=list(reasons))
        return mark_gone(self.collection(source), reasons, now or datetime.now(UTC))

    @mongo_storage_errors()
    def settle_redirects(self, source: SourceConfig, moves: dict[str, str]) -> dict[str, str]:
        """Redirects that stayed on their item (requested -> final URL): records moved to the final URL; the
        requested URLs whose redirect reached another item's record, with the reason (they are gone)."""
        from harvester.storage.lifecycle import settle_redirects

        if self.discarding or not moves:
            return {}
        return settle_redirects(self.collection(source), moves, "url" in source.output.key)

    @mongo_storage_errors()
    def refresh_not_modified(self, source: SourceConfig, urls: list[str], run_id: str | None,
                             now: datetime | None = None) -> int:
        """A 304: the records of these URLs are kept, harvested again now, by this run (one update)."""
        from harvester.storage.conditional import refresh_not_modified

        if self.discarding or not urls:
            return 0
        return refresh_not_modified(self.collection(source), urls, run_id, now or datetime.now(UTC))

    def _bulk_write(self, collection: Collection, upserts: list[_Upsert], result: WriteResult,
                    attempt: int = 0) -> None:
        try:
            written = collection.bulk_write([upsert.operation() for upsert in upserts], ordered=False)
        except BulkWriteError as error:
            details = error.details
            if details.get("writeConcernErrors") or attempt > 1:
                raise
            self._count(result, details.get("nUpserted", 0), details.get("nMatched", 0),
                        details.get("nModified", 0))
            again = []
            for write_error in details.get("writeErrors", []):
                upsert = upserts[write_error["index"]]
                if write_error.get("code") == MONGO_DUPLICATE_KEY and attempt == 0:
                    again.append(upsert)  # a concurrent first upsert of the same key: it exists now
                    continue
                reason = f"MongoDB refused the record: {write_error.get('errmsg', 'no reason given')}"[:500]
                for position in upsert.positions:
                    result.rejected[position] = reason
            if again:
                self._bulk_write(collection, again, result, attempt + 1)
            return
        except ENCODING_ERRORS:
            if attempt > 1:
                raise
            storable = [upsert for upsert in upserts if self._storable(upsert, result)]
            if storable:
                self._bulk_write(collection, storable, result, attempt + 1)
            return
        self._count(result, written.upserted_count, written.matched_count, written.modified_count)
        inserted = {index for index in written.upserted_ids}
        result.empty_kept += sum(1 for index, upsert in enumerate(upserts)
                                 if upsert.insert_only and index not in inserted)

    @staticmethod
    def _storable(upsert: _Upsert, result: WriteResult) -> bool:
        """Whether pymongo can encode this upsert; if not its records are rejected with the reason."""
        try:
            size = len(bson.encode(upsert.filter, codec_options=OUTPUT_CODEC)) + len(
                bson.encode(upsert.update, codec_options=OUTPUT_CODEC))
        except ENCODING_ERRORS as error:
            reason = f"cannot be stored in MongoDB: {type(error).__name__}: {error}"[:500]
        else:
            if size <= MAX_DOCUMENT_BYTES:
                return True
            reason = f"cannot be stored in MongoDB: {size:,} bytes, over the 16 MB document limit"
        for position in upsert.positions:
            result.rejected[position] = reason
        return False

    @staticmethod
    def _count(result: WriteResult, upserted: int, matched: int, modified: int) -> None:
        result.upserted += upserted
        result.matched += matched
        result.modified += modified
