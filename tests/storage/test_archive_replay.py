"""`harvester replay` finds a page whose URL carries percent-escapes (a slug that is not ASCII, an encoded query
value, an escaped slash) when it is asked for as a client sends it: the recorded site's real pages have them."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web
from harvester.config import SourceConfig
from harvester.scraping import Exchange
from harvester.storage import ArchivedPage, ArchiveIndex, ArchiveReplay, ArchiveWriter

pytestmark = pytest.mark.integration
SITE = "http://shop.example"
PATHS = ("/caf%C3%A9-cr%C3%A8me", "/search?q=caf%C3%A9+cr%C3%A8me&page=2", "/a%2Fb", "/p/plain", "/tags?t=a%26b")


@contextmanager
def serving(replay: ArchiveReplay) -> Iterator[str]:
    """The replay's application on a loopback port, in a thread of its own: its base URL."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(replay.application())
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def test_a_replay_answers_paths_with_escapes_as_a_client_sends_them(mongo_server, mongo_database,
                                                                    tmp_path: Path) -> None:
    location = tmp_path / "archive"
    source = SourceConfig.model_validate({
        "name": "shop", "input": {"seeds": [f"{SITE}/"]}, "attributes": {"title": {"css": "h1"}},
        "output": {"archive": {"enabled": True, "location": f"file://{location}"}}})
    index = ArchiveIndex(mongo_server.client()[mongo_database])
    writer = ArchiveWriter(index, "file:///unused", 30.0, 0.0)
    try:
        writer.archive(source, [ArchivedPage(f"task-{number}", "r", SITE + path, Exchange(
            "GET", SITE + path, (), 200, (("Content-Type", "text/html"),), b"<h1>page %d</h1>" % number),
            datetime(2026, 12, 7, tzinfo=UTC)) for number, path in enumerate(PATHS)])
    finally:
        writer.close()
    with serving(ArchiveReplay(index, "shop", "r")) as base:
        answers = {}
        for path in PATHS:
            try:
                with urllib.request.urlopen(base + path, timeout=10) as response:
                    answers[path] = (response.status, response.read())
            except urllib.error.HTTPError as error:
                answers[path] = (error.code, b"")
        assert answers == {path: (200, b"<h1>page %d</h1>" % number) for number, path in enumerate(PATHS)}
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/caf%C3%A9", timeout=10)
        assert missing.value.code == 404
