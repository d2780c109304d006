"""Evidence of failed pages: a batch's rejected pages are kept in one bulk write, each bounded and found by task."""

from __future__ import annotations

import pymongo
import pytest
from harvester.storage import PageEvidence, SnapshotStore
from pymongo import monitoring

from tests.fixtures.servers import MongoServer

pytestmark = pytest.mark.integration


class Writes(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("update", "insert", "delete"):
            self.commands.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None: ...

    def failed(self, event: monitoring.CommandFailedEvent) -> None: ...


def test_a_batchs_rejected_pages_are_kept_in_one_write(mongo_server: MongoServer, mongo_database: str) -> None:
    writes = Writes()
    client = pymongo.MongoClient(mongo_server.uri, serverSelectionTimeoutMS=10_000, event_listeners=[writes])
    try:
        store = SnapshotStore(client[mongo_database], max_bytes=1000)
        store.save("shop", "t0", "http://shop.test/0", "earlier", "<p>old</p>", None)
        writes.commands.clear()
        pages = [PageEvidence(f"t{n}", f"http://shop.test/{n}", f"record rejected: sku: missing ({n})",
                              "<p>" + "x" * 5000 + "</p>") for n in range(8)]
        ids = store.save_many("shop", pages)
        assert writes.commands == ["update"]  # one bulk write of upserts (the expired purge runs once a minute)
        assert ids == [f"shop|t{n}" for n in range(8)]
        kept = store.get("shop", "t0")
        assert kept is not None and kept.reason == "record rejected: sku: missing (0)"  # replaced, not added
        assert len(kept.html.encode()) <= 1000  # bounded as one snapshot is
        assert store.existing("shop", [f"t{n}" for n in range(10)]) == {f"t{n}" for n in range(8)}
    finally:
        client.close()
