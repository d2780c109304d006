"""`harvester replay` finds a page whose URL carries percent-escapes (a slug that is not ASCII, an encoded query
value, an escaped slash) when it is asked for as a client sends it: the recorded site's real pages have them."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest
from harvester.config import SourceConfig
from harvester.scraping import Exchange
from harvester.storage import ArchivedPage, ArchiveIndex, ArchiveWriter

from tests.workers.test_archive import replaying

pytestmark = pytest.mark.integration
SITE = "http://shop.example"
PATHS = ("/caf%C3%A9-cr%C3%A8me", "/search?q=caf%C3%A9+cr%C3%A8me&page=2", "/a%2Fb", "/p/plain", "/tags?t=a%26b")


def test_a_replay_answers_paths_with_escapes_as_a_client_sends_them(configure_settings, tmp_path) -> None:
    settings = configure_settings()
    location = tmp_path / "archive"
    source = SourceConfig.model_validate({
        "name": "escapes", "input": {"seeds": [f"{SITE}/"]}, "attributes": {"title": {"css": "h1"}},
        "output": {"archive": {"enabled": True, "location": f"file://{location}"}}})
    writer = ArchiveWriter(ArchiveIndex.from_settings(settings), "file:///unused", 30.0, 0.0)
    try:
        writer.archive(source, [ArchivedPage(f"task-{number}", "r", SITE + path, Exchange(
            "GET", SITE + path, (), 200, (("Content-Type", "text/html"),), b"<h1>page %d</h1>" % number),
            datetime(2026, 12, 7, tzinfo=UTC)) for number, path in enumerate(PATHS)])
    finally:
        writer.close()
    with replaying(source.name, "r") as (base, _):
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
