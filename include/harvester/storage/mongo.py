"""One pymongo client per process (pymongo pools connections and is fork-unsafe, so it is made lazily
in the process that uses it: a Celery prefork child, not the parent)."""

from __future__ import annotations

import os
import threading

import pymongo

from harvester.settings import HarvesterSettings

_clients: dict[tuple[int, str], pymongo.MongoClient] = {}
_lock = threading.Lock()
DEFAULT_URI = "mongodb://127.0.0.1:27017/?directConnection=true"


def mongo_client(settings: HarvesterSettings) -> pymongo.MongoClient:
    uri = settings.mongo_uri or DEFAULT_URI
    key = (os.getpid(), uri)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10_000, connectTimeoutMS=10_000,
                                         socketTimeoutMS=120_000, tz_aware=True)
            _clients[key] = client
    return client
