"""The source fields of incremental harvests (issue 23): sitemaps as input, change history of the
output, and scheduling a source on another source's Asset.

They live here, beside the model, and are attached to it by inheritance (``Input``, ``Output``) and by
one cross-field check (:func:`check_incremental_rules`), so the model file only names them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator

from harvester.config.attributes import StrictModel

if TYPE_CHECKING:
    from harvester.config.model import SourceConfig

__all__ = ["AfterSchedule", "HistoryOutput", "SitemapInput", "check_incremental_rules", "check_upstreams",
           "robots_txt_url", "schedule_shape"]

SOURCE_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"


def robots_txt_url(url: str) -> str:
    """The robots.txt of a URL's origin, where its ``Sitemap:`` lines are."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/robots.txt"


class SitemapInput(StrictModel):
    """``input.sitemaps`` and ``input.sitemaps_from_robots``: the site's own list of its pages (and when each
    changed) as input. Sitemap indexes, gzip and ``<lastmod>`` are read; a URL whose ``lastmod`` is not
    newer than its last harvest is skipped even past the harvesting lag."""

    sitemaps: list[str] = Field(
        default_factory=list,
        description="Sitemap URLs (XML, a sitemap index, gzip, plain text, or a robots.txt whose Sitemap: lines "
                    "list them). The pages they list are detail pages; listing.follow and max_new_urls apply.")
    sitemaps_from_robots: bool = Field(
        default=False,
        description="Also read the sitemaps named by the robots.txt of every host of input.seeds and input.sitemaps.")

    @field_validator("sitemaps")
    @classmethod
    def _sitemaps_are_urls(cls, value: list[str]) -> list[str]:
        from harvester.config.model import check_http_url

        for url in value:
            check_http_url(url)
        if len(set(value)) != len(value):
            raise ValueError("the same sitemap URL is listed twice")
        return value

    def sitemap_urls(self, seeds: list[str]) -> list[str]:
        """What a run reads first: the sitemaps, then the robots.txt of each host when asked, once each."""
        urls = list(self.sitemaps)
        if self.sitemaps_from_robots:
            urls += [robots_txt_url(url) for url in [*seeds, *self.sitemaps]]
        return list(dict.fromkeys(urls))


class HistoryOutput(StrictModel):
    """``output.history``: every change of a record kept in ``<collection>_history``."""

    history: bool = Field(
        default=False,
        description="Write each changed record's changed fields, with their previous values, the run and the "
                    "time, into <collection>_history.")
    history_retention_days: int = Field(
        default=365, ge=1, le=36_500,
        description="History entries older than this are removed by MongoDB (a TTL index).")


class AfterSchedule(StrictModel):
    """``schedule: {after: [source_name]}``: run whenever those sources' outputs were updated (Airflow Assets)."""

    after: list[str] = Field(
        min_length=1, description="Sources whose outputs' Asset events start this source (once each of them "
                                  "has had one since this source's last run, as Airflow schedules on assets).")

    def __str__(self) -> str:
        """As `harvester sources` shows it."""
        return "after " + ", ".join(self.after)

    @field_validator("after")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        import re

        for name in value:
            if not re.fullmatch(SOURCE_NAME_PATTERN, name):
                raise ValueError(f"{name!r} is not a source name")
        if len(set(value)) != len(value):
            raise ValueError("a source is named twice")
        return value


def schedule_shape(value: Any) -> Any:
    """A schedule is a string, null or ``{after: [...]}``; anything else is one problem, said once."""
    if value is None or isinstance(value, str | AfterSchedule):
        return value
    if isinstance(value, dict):
        try:
            return AfterSchedule.model_validate(value)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"{where}: {first['msg']}" if where else first["msg"]) from None
    raise ValueError("expected a cron expression, a preset (@daily...), {after: [source, ...]} or null")


def check_incremental_rules(source: SourceConfig) -> None:
    """The cross-field rules of these fields; ``ValueError("<field>: <reason>")`` like the model's."""
    sitemaps = source.input.sitemaps or source.input.sitemaps_from_robots
    listing = source.listing
    if listing is not None and not listing.link_selectors and listing.records is None and not sitemaps:
        raise ValueError("listing.link_selectors: give link_selectors (detail pages to visit), records, or both")
    if source.input.sitemaps_from_robots and not (source.input.seeds or source.input.sitemaps):
        raise ValueError("input.sitemaps_from_robots: name the hosts: give input.seeds or input.sitemaps")
    if sitemaps and source.render == "browser":
        raise ValueError("input.sitemaps: sitemaps are read by the HTTP workers; a browser source cannot have "
                         "them yet (make a render: http source of the sitemaps, and schedule this one after it)")
    if sitemaps and source.content == "json":
        raise ValueError("input.sitemaps: a content: json source reads JSON responses, not sitemap pages")
    if isinstance(source.schedule, AfterSchedule) and source.name in source.schedule.after:
        raise ValueError("schedule.after: a source cannot be scheduled after itself")


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
