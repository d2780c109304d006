"""Validated sources cached on disk, keyed by each file's bytes, so a re-parse of unchanged files is cheap.

Airflow's DAG processor parses ``dags/harvest_sources.py`` every 30 s; at 5,000 sources reading and
validating the YAML again each time would cost seconds of CPU for files that did not change. The cache
keeps, per sources directory, one pickle of ``file name -> (content key, SourceConfig)``; an entry is
used only when its content key still matches:

- the SHA-256 of the file's bytes;
- the schema's fingerprint (every module of ``harvester.config``, pydantic's and Python's versions),
  so a new field, default or validator invalidates every entry;
- the current value of each ``${HARVESTER_X}`` placeholder the file names.

Only valid files are cached: a bad file is read again on every load and reports its problems each time.
The cache is an optimisation and never an authority: a missing, foreign, corrupt or unreadable cache is
ignored (and rewritten), and ``source_cache_dir`` empty turns it off. Pickle runs code when loaded, so
the cache file is used only when it belongs to this user and nobody else may write it (the directory
is created 0700).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import re
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harvester.config.model import SourceConfig

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
_PLACEHOLDER = re.compile(rb"\$\{(HARVESTER_[A-Z0-9_]+)\}")


@lru_cache(maxsize=1)
def schema_fingerprint() -> str:
    """What a cached SourceConfig depends on besides its file: the config package's code and pydantic."""
    import pydantic

    digest = hashlib.sha256(f"{CACHE_FORMAT}|{pydantic.VERSION}|{sys.version}".encode())
    package = Path(__file__).resolve().parent
    for module in sorted(package.glob("*.py")):
        digest.update(module.name.encode())
        digest.update(module.read_bytes())
    return digest.hexdigest()


def placeholder_values(data: bytes) -> str:
    """The values the file's ``${HARVESTER_X}`` placeholders expand to now (they are part of the result)."""
    if b"${" not in data:
        return ""
    from harvester.settings import get_settings

    settings = get_settings()
    values = []
    for name in sorted({match.decode() for match in _PLACEHOLDER.findall(data)}):
        text = os.environ.get(name)
        if text is None:
            text = repr(getattr(settings, name.removeprefix("HARVESTER_").lower(), None))
        values.append(f"{name}={text}")
    return "\n".join(values)


def content_key(data: bytes) -> str:
    digest = hashlib.sha256(data)
    digest.update(schema_fingerprint().encode())
    digest.update(placeholder_values(data).encode())
    return digest.hexdigest()


@dataclass
class SourceCache:
    """The cached sources of one directory; :meth:`save` writes back what changed."""

    path: Path | None
    entries: dict[str, tuple[str, SourceConfig]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    changed: bool = False

    @classmethod
    def for_directory(cls, directory: Path, cache_dir: Path | None) -> SourceCache:
        if cache_dir is None:
            return cls(None)
        name = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:24]
        cache = cls(cache_dir / f"sources-{name}.pickle")
        cache.entries = cache._read()
        return cache

    def _read(self) -> dict[str, tuple[str, SourceConfig]]:
        assert self.path is not None
        try:
            with self.path.open("rb") as handle:
                status = os.fstat(handle.fileno())
                if status.st_uid != os.getuid() or status.st_mode & 0o022:
                    log.warning("ignoring the source cache %s: not this user's own, or writable by others", self.path)
                    return {}
                stored = pickle.load(handle)
        except FileNotFoundError:
            return {}
        except Exception as error:  # corrupt, truncated, or classes that no longer exist: start afresh
            log.info("ignoring the source cache %s: %s: %s", self.path, type(error).__name__, error)
            return {}
        if not isinstance(stored, dict) or stored.get("fingerprint") != schema_fingerprint():
            return {}
        entries = stored.get("entries")
        return entries if isinstance(entries, dict) else {}

    def get(self, file_name: str, key: str) -> SourceConfig | None:
        self.seen.add(file_name)
        entry = self.entries.get(file_name)
        return entry[1] if entry is not None and entry[0] == key else None

    def put(self, file_name: str, key: str, source: SourceConfig) -> None:
        self.entries[file_name] = (key, source)
        self.changed = True

    def discard(self, file_name: str) -> None:
        if self.entries.pop(file_name, None) is not None:
            self.changed = True

    def save(self) -> None:
        """Write the entries of the files seen in this load (removed files drop out), atomically."""
        if self.path is None:
            return
        gone = set(self.entries) - self.seen
        if not self.changed and not gone:
            return
        entries = {name: entry for name, entry in self.entries.items() if name in self.seen}
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(prefix=".sources-", dir=self.path.parent)
            try:
                with os.fdopen(descriptor, "wb") as handle:
                    pickle.dump({"fingerprint": schema_fingerprint(), "entries": entries}, handle,
                                protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(temporary, self.path)
            except BaseException:  # even an interrupt must not leave the temporary file behind; re-raised
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except Exception as error:  # a read-only home, a full disk: the sources still load, uncached
            log.warning("could not write the source cache %s: %s", self.path, error)
