"""Sources scheduled after other sources (``schedule: {after: [...]}``): the upstreams each names must exist
and load. A check over every loaded source, so it is the loader's, not one model's."""

from __future__ import annotations

from typing import Any

from harvester.config.incremental import AfterSchedule
from harvester.config.model import SourceConfig

__all__ = ["check_upstreams"]

def check_upstreams(sources: dict[str, SourceConfig], files: dict[str, Any]) -> list[tuple[str, Any, int, str]]:
    """Sources scheduled after a source that does not exist (or whose file does not load): (name, file,
    line, reason) of each, so the loader reports them as that file's problem and builds no DAG for them."""
    problems = []
    for name, source in sources.items():
        if not isinstance(source.schedule, AfterSchedule):
            continue
        missing = [upstream for upstream in source.schedule.after if upstream not in sources]
        if missing:
            path = files.get(name)
            line = _line_of(path, "schedule:") if path is not None else 1
            problems.append((name, path, line, f"no valid source named {', '.join(map(repr, missing))} (a source "
                                               "runs after sources that exist and load)"))
    return problems

def _line_of(path: Any, prefix: str) -> int:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return 1
    return next((number for number, line in enumerate(lines, start=1) if line.startswith(prefix)), 1)
