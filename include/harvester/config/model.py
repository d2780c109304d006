"""The schema of one source (DESIGN.md section 3). Unknown keys are errors: typos must not pass.

Cross-field rules raise ``ValueError("<field>: <reason>")`` so the loader can point at the field's
line in the YAML file (see :mod:`harvester.config.loader`).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from croniter import croniter
from pydantic import Field, field_serializer, field_validator, model_validator

from harvester.config.attributes import (
    RESERVED_FIELDS,
    XPATH_PREFIX,
    Attribute,
    AttributeType,
    ListingRecords,
    StrictModel,
    check_attribute_names,
    check_extraction_rules,
    check_link_expression,
    check_selector,
    duration_schema,
    parse_duration,
)
from harvester.config.blocks import BlockMarkers
from harvester.config.browser import BrowserOptions
from harvester.config.incremental import (
    AfterSchedule,
    HistoryOutput,
    SitemapInput,
    check_http_url,
    schedule_shape,
)
from harvester.config.lifecycle import GoneMarkers
from harvester.config.locales import Visitor, visitor_of
from harvester.config.proxy import ProxyOptions, check_proxy_rules
from harvester.config.quality import Quality
from harvester.config.requests import NextRequest, RequestSeed, check_request_rules
from harvester.queues import DEFAULT_QUEUE, PAGESLOTS_QUEUE, PRIORITY_QUEUE
from harvester.urls import SessionIds

__all__ = ["RESERVED_FIELDS", "XPATH_PREFIX", "Attribute", "AttributeType", "ListingRecords", "SourceConfig",
           "check_selector"]

ResourceType = Literal[
    "image", "font", "media", "stylesheet", "script", "xhr", "fetch", "websocket", "manifest", "other"
]
SCHEDULE_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
MAX_BATCH_SIZE = 10_000


def format_duration(value: timedelta) -> str:
    """The shortest unit that reads back exactly: 6h, 7d, 90s."""
    seconds = int(value.total_seconds())
    for suffix, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{suffix}"
    return f"{seconds}s"



Duration = Annotated[timedelta, duration_schema(0, "90s, 15m, 6h, 7d, 2w")]


class RateLimit(StrictModel):
    """Limits held across ALL workers and machines by the distributor's rate-limit store."""

    max_active: int = Field(default=4, ge=1, le=10_000, description="Tasks in flight at once, across all workers.")
    per_minute: int = Field(default=120, ge=1, le=1_000_000, description="Requests admitted in any rolling minute.")
    per_host_max_active: int | None = Field(
        default=None, ge=1, description="Politeness: in flight at one host, across all workers: tasks admitted, and "
                                       "requests at fetch time (like Scrapy's per-domain slots)."
    )
    per_host_per_minute: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="Politeness: requests started per host in any rolling minute, counted when each fetch starts "
                    "(robots.txt Crawl-delay and Request-rate may make it slower).",
    )

    @model_validator(mode="after")
    def _per_host_within_total(self) -> RateLimit:
        if self.per_host_max_active is not None and self.per_host_max_active > self.max_active:
            raise ValueError("per_host_max_active: cannot exceed max_active")
        return self


class Batch(StrictModel):
    size: int = Field(default=100, ge=1, le=MAX_BATCH_SIZE, description="URLs per package.")
    max_packages: int = Field(default=100, ge=1, le=100_000, description="The batch limit: packages planned per run.")


class MongoInput(StrictModel):
    """Input metadata: URLs read from a MongoDB collection."""

    collection: str = Field(min_length=1, pattern=r"^[^$\x00]+$")
    database: str | None = Field(default=None, description="Defaults to the harvester database.")
    filter: dict[str, Any] = Field(default_factory=dict, description="A MongoDB query selecting the input documents.")
    url_field: str = Field(default="url", min_length=1, description="The field of an input document holding its URL.")
    connection_id: str = Field(default="mongo_default", description="Airflow connection of the MongoDB.")


class Input(SitemapInput):
    """Where the URLs of a run come from: seed URLs, a MongoDB collection, or both."""

    seeds: list[str] = Field(default_factory=list, description="Absolute http(s) URLs.")
    kind: Literal["listing", "details"] = Field(
        default="details",
        description="What the input URLs are: listing pages or detail pages. "
                    "Defaults to listing when the source has a listing section, else details.",
    )
    mongo: MongoInput | None = None
    requests: list[RequestSeed] = Field(
        default_factory=list, description="First requests with a method and a body (GraphQL, search APIs): "
                                          "{url, method, json | form, headers, safe_to_repeat}.")

    @field_validator("seeds")
    @classmethod
    def _seeds_are_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            check_http_url(url)
        if len(set(value)) != len(value):
            raise ValueError("the same seed URL is listed twice")
        return value

    @model_validator(mode="after")
    def _needs_something(self) -> Input:
        if not self.seeds and self.mongo is None and not self.sitemaps and not self.requests:
            raise ValueError("give seeds or mongo (or both), sitemaps, or requests")
        return self


class Listing(StrictModel):
    """How listing pages lead to more pages (BFS)."""

    link_selectors: list[str] = Field(
        default_factory=list, description="CSS (or xpath:...) selecting detail links; json:... on JSON pages.")
    next_page_selectors: list[str] = Field(default_factory=list, description="Pagination links.")
    records: ListingRecords | None = Field(default=None, description="One record per item of the listing page.")
    follow: str = Field(default=".*", description="Regular expression a detail URL must match.")
    follow_pages: str | None = Field(
        default=None, description="Regular expression a next listing page's URL must match; by default a next "
                                  "page must be on the same site as the page that links it.")
    max_depth: int = Field(default=2, ge=0, le=50, description="BFS levels of listing pages to follow.")
    max_new_urls: int = Field(default=10_000, ge=1, description="New detail URLs per run.")
    next: NextRequest | None = Field(
        default=None, description="The next request built from a JSON response: a cursor, a page number or an "
                                  "offset put into the body (or the query), bounded by max_depth.")

    @field_validator("link_selectors", "next_page_selectors")
    @classmethod
    def _selectors_compile(cls, value: list[str]) -> list[str]:
        for selector in value:
            if not selector.strip().startswith("json:"):  # json: expressions are checked with the content
                check_selector(selector)
        return value

    @field_validator("follow", "follow_pages")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        """On the linear-time engine links are matched with (Python's re would backtrack)."""
        from harvester.patterns import compile_pattern

        if value is not None:
            compile_pattern(value)
        return value


class SessionIdNames(StrictModel):
    """Which URL parameters are session ids on this site, beyond or instead of the defaults of
    :mod:`harvester.urls` (``jsessionid``, ``PHPSESSID``, ``sid`` and ``sessionid`` with a token-like value…)."""

    drop: list[str] = Field(default_factory=list, description=(
        "More query or ;path parameter names that carry a session on this site: left out of the canonical URL "
        "(the key of a page) whatever their value."))
    keep: list[str] = Field(default_factory=list, description=(
        "Parameter names Harvester takes for session ids that this site uses for something else: kept in the "
        "canonical URL."))

    @field_validator("drop", "keep")
    @classmethod
    def _names(cls, names: list[str], info: Any) -> list[str]:
        for name in names:
            if not re.fullmatch(r"[A-Za-z_][\w.-]{0,99}", name):
                raise ValueError(f"session_ids.{info.field_name}: {name!r} is not a URL parameter name "
                                 "(letters, digits, '_', '.', '-')")
        return [name.lower() for name in names]

    @model_validator(mode="after")
    def _not_both(self) -> SessionIdNames:
        if both := sorted(set(self.drop) & set(self.keep)):
            raise ValueError(f"session_ids: {', '.join(both)} cannot be both dropped and kept")
        return self

    @property
    def rules(self) -> SessionIds:
        return SessionIds(frozenset(self.drop), frozenset(self.keep))


ARCHIVE_LOCATION_SCHEMES = ("file", "s3", "gs", "gcs", "az", "abfs", "memory")


class Archive(StrictModel):
    """``output.archive``: every response a task fetched, kept as WARC/1.1 records (request, response, revisit)
    with an index in MongoDB, so a fixed config can be re-run over what the site said, without asking it again."""

    enabled: bool = Field(default=False, description="Write every fetched response of the source to the archive.")
    location: str | None = Field(
        default=None, description="Where the WARC files go, as a URL (file:///data/archive, s3://bucket/warc); "
                                  "default: the HARVESTER_ARCHIVE_LOCATION setting.")
    connection_id: str | None = Field(
        default=None, description="An Airflow connection holding the object store's credentials (s3://, gs://).")
    keep: Duration = Field(default=timedelta(days=30), description="How long archived files and their index "
                                                                   "rows are kept (the daily clean-up).")
    required: bool = Field(default=False, description="true: a batch whose responses cannot be archived is "
                                                      "retried; false: its records are stored and the gap counted.")
    max_file_mb: int = Field(default=100, ge=1, le=10_000, description="A WARC file is rotated past this size.")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """``archive: true`` is ``archive: {enabled: true}``."""
        return {"enabled": value} if isinstance(value, bool) else value

    @field_validator("keep", mode="before")
    @classmethod
    def _keep(cls, value: Any) -> timedelta:
        try:
            duration = parse_duration(value)
        except ValueError as error:
            raise ValueError(f"output.archive.keep: {error}") from None
        if duration < timedelta(hours=1):
            raise ValueError("output.archive.keep: keep the archive at least 1h (re-extraction reads it)")
        return duration

    @field_validator("location")
    @classmethod
    def _location(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in ARCHIVE_LOCATION_SCHEMES:
            raise ValueError(f"output.archive.location: expected a URL of {', '.join(ARCHIVE_LOCATION_SCHEMES)} "
                             f"(file:///data/archive, s3://bucket/prefix), got {value!r}")
        return value.rstrip("/")

    @field_serializer("keep", when_used="json")
    def _keep_text(self, value: timedelta) -> str:
        """As YAML writes it, so the registered copy validates back to the same config."""
        return format_duration(value)


class Output(HistoryOutput):
    database: str | None = Field(default=None, description="Defaults to the harvester database.")
    collection: str | None = Field(default=None, pattern=r"^[^$\x00]+$", description="Defaults to the source name.")
    key: list[str] = Field(default_factory=lambda: ["url"], min_length=1, description="Fields of the upsert key.")
    connection_id: str = "mongo_default"
    archive: Archive = Field(default_factory=Archive, description="Keep every fetched response as WARC records "
                                                                  "(true, or a mapping of the fields below).")


class SourceConfig(StrictModel):
    """One source: what to harvest, how often, how politely, and where the records go."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$", description="Lower-case id; the DAG is harvest_<name>.")
    description: str = ""
    owner: str = Field(default="harvester", min_length=1)
    schedule: str | AfterSchedule | None = Field(
        default="@daily", description="A cron expression, a preset (@daily...), {after: [source]} or null.")
    priority: Literal["high", "normal"] = "normal"
    render: Literal["http", "browser"] = "http"
    country: str | None = Field(default=None, pattern=r"^[A-Z]{2}$", description="ISO 3166 alpha-2, e.g. SG.")
    visitor: Visitor | None = Field(
        default=None, description="locale, timezone_id, accept_language over the country's defaults (config.locales).")
    proxy: ProxyOptions = Field(
        default_factory=ProxyOptions,
        description="HTTP sources with a country: tiers of ways out, cheapest first (direct, then pools "
                    "proxy_<country>_<tier>), and how long a blocked tier stays above a host (docs/sources.md).")
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    batch: Batch = Field(default_factory=Batch)
    harvesting_lag: Duration = Field(default=timedelta(days=1))
    input: Input
    listing: Listing | None = None
    content: Literal["html", "json"] = Field(
        default="html", description="What the pages are: HTML, or JSON responses (APIs) read with json: selectors.")
    attributes: dict[str, Attribute] = Field(
        default_factory=dict, description="Fields of a detail page's record (at least one, unless listing.records).")
    output: Output = Field(default_factory=Output)
    retries: int = Field(default=3, ge=0, le=20)
    timeout: float = Field(default=30.0, gt=0, le=600, description="Seconds per request.")
    headers: dict[str, str] = Field(default_factory=dict)
    blocked_resource_types: list[ResourceType] = Field(
        default_factory=lambda: ["image", "font", "media"]
    )
    drift_threshold: float = Field(
        default=20.0, gt=0, le=100,
        description="Selector drift: an attribute found in this many percentage points fewer records than "
                    "the median of the previous runs is flagged.",
    )
    quality: Quality = Field(default_factory=Quality, description="When a run's data makes it red: thresholds "
                                                                  "and what a breach does (fail or warn).")
    robots: Literal["obey", "ignore"] = Field(
        default="obey", description="obey: robots.txt Disallow, Crawl-delay and Request-rate apply (the default).")
    max_retry_after: float | None = Field(
        default=None, gt=0, description="Seconds: the longest pause a Retry-After of this site may ask for "
                                        "(at most HARVESTER_MAX_RETRY_AFTER_SECONDS).")
    browser: BrowserOptions = Field(
        default_factory=BrowserOptions,
        description="Browser sources: when a page is ready (wait_for, wait_timeout), actions before extraction, "
                    "isolation of visits, WebSockets (docs/sources.md, the browser section).")
    gone: GoneMarkers = Field(
        default_factory=GoneMarkers,
        description="When a detail page's item is gone: statuses (404, 410), and the selectors or texts of a "
                    "page that answers 200 for an item that no longer exists (docs/sources.md, gone).")
    block: BlockMarkers = Field(
        default_factory=BlockMarkers,
        description="What this site's block pages look like (selectors, texts, statuses) beside the built-in "
                    "markers: a match is retried, never stored (docs/sources.md, the block section).")
    session_ids: SessionIdNames = Field(default_factory=SessionIdNames, description=(
        "Session ids in this site's URLs: the canonical URL (a page's key, what `follow` matches) leaves out "
        "jsessionid, PHPSESSID, sid/sessionid with a token-like value and the like; `drop` names more, `keep` "
        "keeps some."))
    url_key: Literal["requested", "canonical_link"] = Field(default="requested", description=(
        "The URL a detail record is stored under: `requested`, the canonical form of the URL fetched; or "
        "`canonical_link`, the page's <link rel=canonical> when it names a page of the same site (one item "
        "reached by several URLs is then one record)."))
    http_connection_id: str | None = Field(
        default=None, min_length=1, pattern=r"^[A-Za-z0-9_.-]+$",
        description="An Airflow HTTP connection whose login/password (basic auth) or extras (headers, cookies) "
                    "every request carries; credentials never go in YAML.",
    )

    @model_validator(mode="before")
    @classmethod
    def _input_kind_follows_listing(cls, data: Any) -> Any:
        """A source with a listing section starts from listing pages unless it says otherwise."""
        given_input = data.get("input") if isinstance(data, dict) else None
        if isinstance(given_input, dict) and "kind" not in given_input and data.get("listing") is not None:
            data = {**data, "input": {**given_input, "kind": "listing"}}
        return data

    @field_validator("harvesting_lag", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return parse_duration(value)

    @field_validator("schedule", mode="before")
    @classmethod
    def _schedule_shape(cls, value: Any) -> Any:
        """One clear problem for a value of the wrong shape (not one per member of the union)."""
        return schedule_shape(value)

    @field_serializer("harvesting_lag", when_used="json")
    def _duration_text(self, value: timedelta) -> str:
        """As YAML writes it ("6h"), so the registered copy (JSON) validates back to the same config."""
        return format_duration(value)

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | AfterSchedule | None) -> str | AfterSchedule | None:
        if value is None or isinstance(value, AfterSchedule) or value in SCHEDULE_PRESETS:
            return value
        if value.startswith("@") or not croniter.is_valid(value):
            raise ValueError(f"not a cron expression or one of {', '.join(SCHEDULE_PRESETS)}: {value!r}")
        return value

    @field_validator("attributes")
    @classmethod
    def _attribute_names(cls, value: dict[str, Attribute]) -> dict[str, Attribute]:
        check_attribute_names(value)
        return value

    @model_validator(mode="after")
    def _cross_field_rules(self) -> SourceConfig:
        check_incremental_rules(self)
        check_request_rules(self.input.requests, self.render, self.content, self.listing and self.listing.next)
        if self.render == "browser" and self.country is None:
            raise ValueError("country: a browser source needs a country (its page slots are per country)")
        check_proxy_rules(self.proxy, self.render, self.country)
        if self.render != "browser" and self.browser != BrowserOptions():
            raise ValueError("browser: only browser sources (render: browser) have a browser section")
        if self.input.kind == "listing" and self.listing is None:
            raise ValueError("listing: input.kind is listing, so a listing section must say which links to follow")
        if self.input.kind == "details" and self.listing is not None:
            raise ValueError("input.kind: the source has a listing section but its input is details pages")
        records = self.listing.records if self.listing is not None else None
        key_given = "key" in self.output.model_fields_set
        check_extraction_rules(self.content, self.render, self.attributes, records, self.output.key, key_given,
                               bool(self.listing and self.listing.link_selectors))
        if self.listing is not None:
            for link in (*self.listing.link_selectors, *self.listing.next_page_selectors):
                check_link_expression(link, self.content)
        if records is not None:  # the records' key is the collection's (check_extraction_rules held them equal)
            if not key_given:
                object.__setattr__(self, "output", self.output.model_copy(update={"key": list(records.key)}))
            return self
        known = {"url", *self.attributes}
        for field in self.output.key:
            if field not in known:
                raise ValueError(f"output.key: {field!r} is neither url nor an attribute of this source")
            if field != "url" and (self.attributes[field].type.startswith("list[")
                                   or self.attributes[field].type in ("price", "present")):
                raise ValueError(f"output.key: {field!r} is a {self.attributes[field].type} attribute; key fields "
                                 "must be url or plain scalar attributes")
        return self

    @property
    def presented_visitor(self) -> Visitor | None:
        """The locale, time zone and Accept-Language its pages are asked for: ``visitor`` over the country's."""
        return visitor_of(self.country, self.visitor)

    @property
    def queue(self) -> str:
        """The Celery queue whose workers run the admitted tasks: priority or default, and for a browser
        source ``pageslots`` (its tasks wait in the list of their country's slots, not as Celery messages)."""
        if self.render == "browser":
            return PAGESLOTS_QUEUE
        return PRIORITY_QUEUE if self.priority == "high" else DEFAULT_QUEUE

    @property
    def record_attributes(self) -> list[str]:
        """Every field a record of this source may have: detail attributes, then listing records' ones."""
        records = self.listing.records if self.listing is not None else None
        return list(dict.fromkeys([*self.attributes, *(records.attributes if records else {})]))

    @property
    def output_collection(self) -> str:
        return self.output.collection or self.name

    @property
    def follows_chains(self) -> bool:
        """Whether its batches send a listing page's next request themselves (``listing.next`` over HTTP: an API's
        cursor or page numbers, harvester.workers.chains)."""
        return self.render == "http" and self.listing is not None and self.listing.next is not None


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
