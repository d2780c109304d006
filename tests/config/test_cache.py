"""The on-disk cache of validated sources (harvester.config.cache): what it answers, and what it never does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harvester.config import cache as source_cache
from harvester.config import loader
from harvester.config.loader import load_sources
from harvester.settings import get_settings

pytestmark = pytest.mark.unit
SOURCE = "name: {name}\ninput: {{kind: details, seeds: ['{seed}']}}\nattributes: {{t: h1}}\n"


@pytest.fixture
def cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[str]]:
    """A sources directory, a cache directory of this test, and the files validated since (parse_source calls)."""
    sources, cache_dir = tmp_path / "sources", tmp_path / "cache"
    sources.mkdir()
    monkeypatch.setenv("HARVESTER_SOURCE_CACHE_DIR", str(cache_dir))
    get_settings.cache_clear()
    validated: list[str] = []
    parse = loader.parse_source
    monkeypatch.setattr(loader, "parse_source", lambda text, file="<string>": validated.append(Path(file).name)
                        or parse(text, file))
    yield sources, cache_dir, validated
    get_settings.cache_clear()


def write(sources: Path, name: str, seed: str = "http://a.example/1") -> None:
    (sources / f"{name}.yaml").write_text(SOURCE.format(name=name, seed=seed))


def test_unchanged_files_come_from_the_cache_and_an_edit_is_seen_at_once(cached) -> None:
    sources, _, validated = cached
    write(sources, "one")
    write(sources, "two")
    assert sorted(load_sources(sources).sources) == ["one", "two"]
    assert validated == ["one.yaml", "two.yaml"]
    validated.clear()
    assert load_sources(sources).sources["one"].input.seeds == ["http://a.example/1"]
    assert validated == []
    write(sources, "one", seed="http://a.example/edited")
    assert load_sources(sources).sources["one"].input.seeds == ["http://a.example/edited"]
    assert validated == ["one.yaml"]
    (sources / "two.yaml").unlink()
    assert sorted(load_sources(sources).sources) == ["one"]


def test_a_bad_file_is_never_cached_and_reports_its_problem_every_time(cached) -> None:
    sources, _, validated = cached
    write(sources, "good")
    (sources / "bad.yaml").write_text("name: bad\ninput: {kind: details, seeds: ['ftp://x']}\nattributes: {t: h1}\n")
    for _ in range(2):
        result = load_sources(sources)
        assert list(result.sources) == ["good"] and len(result.errors) == 1
        assert "bad.yaml:2: input.seeds" in str(result.errors[0])
    assert validated.count("bad.yaml") == 2 and validated.count("good.yaml") == 1


def test_a_placeholder_value_is_part_of_the_key(cached, monkeypatch: pytest.MonkeyPatch) -> None:
    sources, _, _ = cached
    (sources / "demo.yaml").write_text(SOURCE.format(name="demo", seed="${HARVESTER_DEMO_SITE_URL}/p/1"))
    monkeypatch.setenv("HARVESTER_DEMO_SITE_URL", "http://127.0.0.1:8001")
    assert load_sources(sources).sources["demo"].input.seeds == ["http://127.0.0.1:8001/p/1"]
    monkeypatch.setenv("HARVESTER_DEMO_SITE_URL", "http://127.0.0.1:8002")
    assert load_sources(sources).sources["demo"].input.seeds == ["http://127.0.0.1:8002/p/1"]


def test_a_new_schema_invalidates_every_entry(cached, monkeypatch: pytest.MonkeyPatch) -> None:
    sources, _, validated = cached
    write(sources, "one")
    load_sources(sources)
    monkeypatch.setattr(source_cache, "schema_fingerprint", lambda: "another schema")
    validated.clear()
    load_sources(sources)
    assert validated == ["one.yaml"]


def test_a_corrupt_or_foreign_cache_is_ignored_and_rewritten(cached) -> None:
    sources, cache_dir, validated = cached
    write(sources, "one")
    load_sources(sources)
    (path,) = cache_dir.iterdir()
    path.write_bytes(b"\x80\x05not a pickle")
    validated.clear()
    assert list(load_sources(sources).sources) == ["one"] and validated == ["one.yaml"]
    os.chmod(path, 0o666)  # writable by others: somebody could have put code in it
    validated.clear()
    assert list(load_sources(sources).sources) == ["one"] and validated == ["one.yaml"]
    assert path.stat().st_mode & 0o077 == 0  # rewritten as the user's own file


def test_an_unwritable_cache_directory_still_loads_every_source(cached, monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    sources, _, _ = cached
    write(sources, "one")
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("HARVESTER_SOURCE_CACHE_DIR", str(blocker / "cache"))
    get_settings.cache_clear()
    assert list(load_sources(sources).sources) == ["one"]
