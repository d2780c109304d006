"""`harvester rekey --source X`: records and seen-URL keys move to the canonical URL form."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta

import pytest
from harvester.cli import main
from harvester.storage.url_store import URLStore

pytestmark = pytest.mark.integration

SOURCE = textwrap.dedent("""\
    name: rekeyed
    input:
      seeds: ["http://site.example/p/1"]
    attributes:
      title: "h1::text"
    harvesting_lag: 6h
""")


def test_rekey_moves_records_and_seen_urls_to_the_canonical_form(
        configure_settings, mongo_server, redis_client, capsys) -> None:
    settings = configure_settings()
    (settings.sources_dir / "rekeyed.yaml").write_text(SOURCE)
    output = mongo_server.client()[settings.mongo_database]["rekeyed"]
    output.create_index("url", unique=True, name="harvester_output_key")
    now = datetime.now(UTC)
    output.insert_many([
        {"url": "HTTP://Site.Example:80/p/1?utm_source=x", "title": "one", "harvested_at": now},
        {"url": "http://site.example/p/2#reviews", "title": "two", "harvested_at": now},
        # Two spellings of one page: the newer record stays, under the canonical URL.
        {"url": "http://site.example/p/3?b=2&a=1", "title": "old", "harvested_at": now - timedelta(days=2)},
        {"url": "http://site.example/p/3?a=1&b=2", "title": "new", "harvested_at": now},
        {"url": "http://site.example/p/4", "title": "already canonical", "harvested_at": now},
        {"url": "http://site.example/p/5?q=caf%E9", "title": "not rewritten", "harvested_at": now},
    ])
    old_key = URLStore.key("rekeyed", "HTTP://Site.Example:80/p/1?utm_source=x")
    redis_client.set(old_key, "stored", ex=3600)

    assert main(["rekey", "--source", "rekeyed"]) == 0
    report = capsys.readouterr().out
    assert "2 record(s) moved" in report and "1 duplicate(s) removed" in report and "1 seen-URL key(s)" in report

    documents = {document["url"]: document["title"] for document in output.find()}
    assert documents == {
        "http://site.example/p/1": "one", "http://site.example/p/2": "two", "http://site.example/p/3?a=1&b=2": "new",
        "http://site.example/p/4": "already canonical", "http://site.example/p/5?q=caf%E9": "not rewritten",
    }
    new_key = URLStore.key("rekeyed", "http://site.example/p/1")
    assert redis_client.get(new_key) == b"stored" and 3500 < redis_client.ttl(new_key) <= 3600
    assert not redis_client.exists(old_key)

    assert main(["rekey", "--source", "rekeyed"]) == 0  # a second run has nothing left to do
    assert "0 record(s) moved" in capsys.readouterr().out


def test_rekey_dry_run_changes_nothing(configure_settings, mongo_server, capsys) -> None:
    settings = configure_settings()
    (settings.sources_dir / "rekeyed.yaml").write_text(SOURCE)
    output = mongo_server.client()[settings.mongo_database]["rekeyed"]
    output.insert_one({"url": "http://site.example/p/1#x", "harvested_at": datetime.now(UTC)})
    assert main(["rekey", "--source", "rekeyed", "--dry-run"]) == 0
    assert "1 record(s) to move" in capsys.readouterr().out
    assert output.find_one()["url"] == "http://site.example/p/1#x"


def test_rekey_of_an_unknown_source_fails(configure_settings, capsys) -> None:
    configure_settings()
    assert main(["rekey", "--source", "nope"]) == 1
    assert "nope" in capsys.readouterr().err


def test_rekey_moves_urls_with_session_ids_to_one_record(configure_settings, mongo_server, redis_client,
                                                         capsys) -> None:
    """Records stored before session ids left the canonical URL: one item under two sessions becomes one
    record (the newer), and a name the source keeps stays."""
    settings = configure_settings()
    (settings.sources_dir / "rekeyed.yaml").write_text(SOURCE + "session_ids:\n  keep: [lang_session]\n")
    output = mongo_server.client()[settings.mongo_database]["rekeyed"]
    output.create_index("url", unique=True, name="harvester_output_key")
    now = datetime.now(UTC)
    output.insert_many([
        {"url": "http://site.example/item/7;jsessionid=0A1B2C3D4E5F6A7B8C9D", "title": "old",
         "harvested_at": now - timedelta(hours=1)},
        {"url": "http://site.example/item/7?PHPSESSID=9f1c2e77a04b4d3e9f1c", "title": "new", "harvested_at": now},
        {"url": "http://site.example/item/8?lang_session=fr12345678901234567", "title": "kept", "harvested_at": now},
    ])
    old_key = URLStore.key("rekeyed", "http://site.example/item/7?PHPSESSID=9f1c2e77a04b4d3e9f1c")
    redis_client.set(old_key, "stored", ex=3600)

    assert main(["rekey", "--source", "rekeyed"]) == 0
    assert "1 duplicate(s) removed" in capsys.readouterr().out
    documents = {document["url"]: document["title"] for document in output.find()}
    assert documents == {"http://site.example/item/7": "new",
                         "http://site.example/item/8?lang_session=fr12345678901234567": "kept"}
    assert redis_client.get(URLStore.key("rekeyed", "http://site.example/item/7")) == b"stored"
