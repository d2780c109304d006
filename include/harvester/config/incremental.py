"""The source fields of incremental harvests: sitemaps as input, change history of the output, and
scheduling a source on another source's Asset.

They live here, below the model, and are attached to it by inheritance (``Input``, ``Output``); the
cross-field check over a whole source is the model's (``check_incremental_rules``), and the check of
upstream sources the loader's, so this module never imports the model.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from harvester.config.attributes import StrictModel

__all__ = ["AfterSchedule", "HistoryOutput", "SitemapInput", "check_http_url", "robots_txt_url", "schedule_shape"]

SOURCE_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"


def check_http_url(value: str) -> str:
    """Only absolute http(s) URLs are fetched (DESIGN.md section 9: other schemes are ignored)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an absolute http(s) URL: {value!r}")
    return value


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
    sitemaps_other_sites: bool = Field(
        default=False,
        description="Keep the pages and child sitemaps a sitemap lists on other sites than its own (another "
                    "registrable domain). Off by default: they are dropped and counted (off_site), as the sitemap "
                    "protocol allows a sitemap to speak only for its own site; even when kept, their lastmod is "
                    "not believed.")

    @field_validator("sitemaps_other_sites")
    @classmethod
    def _other_sites_need_sitemaps(cls, value: bool, info: ValidationInfo) -> bool:
        if value and not (info.data.get("sitemaps") or info.data.get("sitemaps_from_robots")):
            raise ValueError("sitemaps_other_sites applies to sitemaps: name input.sitemaps or sitemaps_from_robots")
        return value

    @field_validator("sitemaps")
    @classmethod
    def _sitemaps_are_urls(cls, value: list[str]) -> list[str]:
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



