"""Source configs as a worker reads them: from YAML, cached briefly."""

from __future__ import annotations

import time
from pathlib import Path

from harvester.config.model import SourceConfig
from harvester.settings import HarvesterSettings

SOURCE_CACHE_SECONDS = 30.0


class SourceCache:
    """Source configs read from YAML, re-read after a short time so edits reach running workers."""

    def __init__(self, directory: Path, ttl: float = SOURCE_CACHE_SECONDS) -> None:
        self.directory = directory
        self.ttl = ttl
        self._entries: dict[str, tuple[float, SourceConfig]] = {}

    @classmethod
    def from_settings(cls, settings: HarvesterSettings) -> SourceCache:
        return cls(settings.sources_dir)

    def get(self, name: str) -> SourceConfig:
        from harvester.config.loader import get_source, load_source_file

        entry = self._entries.get(name)
        if entry is not None and time.monotonic() - entry[0] < self.ttl:
            return entry[1]
        source = None
        for suffix in (".yaml", ".yml"):  # the usual layout, <name>.yaml: one file, not the whole directory
            path = self.directory / f"{name}{suffix}"
            if path.is_file():
                source = load_source_file(path)
                break
        if source is None or source.name != name:
            source = get_source(name, self.directory)
        self._entries[name] = (time.monotonic(), source)
        return source
