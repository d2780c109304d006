"""The schema of one source (DESIGN.md section 3). Unknown keys are errors: typos must not pass."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

AttributeType = Literal[
    "str", "int", "float", "bool", "date", "url",
    "list[str]", "list[int]", "list[float]", "list[bool]", "list[date]", "list[url]",
]
ResourceType = Literal[
    "image", "font", "media", "stylesheet", "script", "xhr", "fetch", "websocket", "manifest", "other"
]
_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_DURATION_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(value: Any) -> timedelta:
    """Read "90s", "15m", "6h", "7d", "2w" (or a number of seconds) as a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    if isinstance(value, str) and (match := _DURATION.match(value)):
        return timedelta(**{_DURATION_UNITS[match.group(2)]: int(match.group(1))})
    raise ValueError("expected a duration such as 90s, 15m, 6h, 7d or 2w")


Duration = Annotated[timedelta, Field(json_schema_extra={"type": "string", "pattern": _DURATION.pattern})]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RateLimit(StrictModel):
    """Limits held across ALL workers and machines by the distributor's rate-limit store."""

    max_active: int = Field(default=4, ge=1, description="Tasks in flight at once, across all workers.")
    per_minute: int = Field(default=120, ge=1, description="Requests admitted in any rolling minute.")
    per_host_max_active: int | None = Field(
        default=None, ge=1, description="Politeness: tasks in flight per host (like Scrapy's slots)."
    )


class Batch(StrictModel):
    size: int = Field(default=100, ge=1, le=10_000, description="URLs per package.")
    max_packages: int = Field(default=100, ge=1, description="The batch limit: packages planned per run.")


class MongoInput(StrictModel):
    """Input metadata: URLs read from a MongoDB collection."""

    collection: str = Field(min_length=1)
    database: str | None = Field(default=None, description="Defaults to the harvester database.")
    filter: dict[str, Any] = Field(default_factory=dict)
    url_field: str = "url"
    connection_id: str = Field(default="mongo_default", description="Airflow connection of the MongoDB.")


class Input(StrictModel):
    """Where the URLs of a run come from: seed URLs, a MongoDB collection, or both."""

    seeds: list[str] = Field(default_factory=list)
    kind: Literal["listing", "details"] = Field(
        default="listing", description="What the input URLs are: listing pages or detail pages."
    )
    mongo: MongoInput | None = None

    @model_validator(mode="after")
    def _needs_something(self) -> Input:
        if not self.seeds and self.mongo is None:
            raise ValueError("give seeds or mongo (or both)")
        return self


class Listing(StrictModel):
    """How listing pages lead to more pages (BFS)."""

    link_selectors: list[str] = Field(min_length=1, description="CSS (or xpath:...) selecting <a> links.")
    next_page_selectors: list[str] = Field(default_factory=list, description="Pagination links.")
    follow: str = Field(default=".*", description="Regular expression a detail URL must match.")
    max_depth: int = Field(default=2, ge=0, description="BFS levels of listing pages to follow.")
    max_new_urls: int = Field(default=10_000, ge=1, description="New detail URLs per run.")

    @field_validator("follow")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a valid regular expression: {error}") from error
        return value


class Attribute(StrictModel):
    """One field of the record: a selector and a type."""

    css: str | None = None
    xpath: str | None = None
    type: AttributeType = "str"
    required: bool = False

    @model_validator(mode="after")
    def _one_selector(self) -> Attribute:
        if (self.css is None) == (self.xpath is None):
            raise ValueError("give exactly one of css or xpath")
        return self


class Output(StrictModel):
    database: str | None = Field(default=None, description="Defaults to the harvester database.")
    collection: str | None = Field(default=None, description="Defaults to the source name.")
    key: list[str] = Field(default_factory=lambda: ["url"], min_length=1)
    connection_id: str = "mongo_default"


class SourceConfig(StrictModel):
    """One source: what to harvest, how often, how politely, and where the records go."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")
    description: str = ""
    owner: str = "harvester"
    schedule: str | None = "@daily"
    priority: Literal["high", "normal"] = "normal"
    render: Literal["http", "browser"] = "http"
    country: str | None = Field(default=None, pattern=r"^[A-Z]{2}$")
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    batch: Batch = Field(default_factory=Batch)
    harvesting_lag: Duration = Field(default=timedelta(days=1))
    input: Input
    listing: Listing | None = None
    attributes: dict[str, Attribute] = Field(min_length=1)
    output: Output = Field(default_factory=Output)
    retries: int = Field(default=3, ge=0, le=20)
    timeout: float = Field(default=30.0, gt=0, le=600, description="Seconds per request.")
    headers: dict[str, str] = Field(default_factory=dict)
    blocked_resource_types: list[ResourceType] = Field(
        default_factory=lambda: ["image", "font", "media"]
    )

    @field_validator("harvesting_lag", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return parse_duration(value)

    @model_validator(mode="after")
    def _browser_needs_country(self) -> SourceConfig:
        if self.render == "browser" and self.country is None:
            raise ValueError("country: a browser source needs a country (its page slots are per country)")
        return self

    @property
    def queue(self) -> str:
        """The Celery queue admitted tasks go to."""
        if self.render == "browser":
            return f"pageslots.{self.country}"
        return "priority" if self.priority == "high" else "default"

    @property
    def output_collection(self) -> str:
        return self.output.collection or self.name
