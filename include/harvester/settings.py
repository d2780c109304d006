"""Every tunable of Harvester in one pydantic model, read from ``HARVESTER_*`` environment variables.

One source of truth: components take a :class:`HarvesterSettings` (their constructor or their
``from_settings``) instead of reading the environment themselves, so a test can build one with
overrides; only entry points (commands, worker processes, Airflow tasks) call :func:`get_settings`.
"""

from __future__ import annotations

import os
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

import harvester

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
HARVESTER_VERSION = harvester.__version__


class HarvesterSettings(BaseSettings):
    """Settings shared by every Harvester process."""

    model_config = SettingsConfigDict(env_prefix="HARVESTER_", extra="ignore")

    # Where things are.
    redis_url: str = "redis://127.0.0.1:6379/0"
    mongo_uri: str | None = Field(
        default=None,
        description="A real MongoDB; when unset, make run / make test start mongod or the stand-in.",
    )
    mongo_database: str = "harvester"
    sources_dir: Path = REPOSITORY_ROOT / "include" / "sources"
    demo_site_url: str = "http://127.0.0.1:8008"

    # Distributor and rate-limit store (DESIGN.md section 4).
    rate_window_seconds: float = Field(default=60.0, gt=0, description="Rolling window of per_minute.")
    rate_window_margin_seconds: float = Field(
        default=1.0, ge=0,
        description="A fetch's rate token stays in the window this much longer than the window: a request "
                    "reaches the site a little after its token, and the site's window must never see more.")
    lease_seconds: float = Field(default=120.0, gt=0, description="A task not heartbeaten this long is reaped.")
    heartbeat_seconds: float = Field(default=20.0, gt=0)
    reap_interval_seconds: float = Field(default=5.0, gt=0)
    queue_max_depth: int = Field(
        default=100, ge=1, description="Backpressure: a Celery queue (or a country's slot list, in messages of "
        "publish_batch_size) this many messages deep gets nothing more this round. Beyond what the worker processes "
        "take at once a deeper queue only delays: its tasks hold their places while they wait, and once refilling "
        "batches took them over (harvester.workers.refill) each is a stale message every process must drain first "
        "(at 2,000 a broad source's workers stopped for 10 s to drain them). Raise it for a fleet of more processes "
        "than this serving one queue.")
    admit_batch_size: int = Field(
        default=500, ge=1, le=10_000,
        description="Tasks admitted per source per round (admitted in chunks of at most 1000 per atomic call).")
    retry_base_seconds: float = Field(default=2.0, ge=0)
    retry_max_seconds: float = Field(default=300.0, ge=0)
    publish_batch_size: int = Field(default=16, ge=1, description="Tasks of one source per Celery message.")
    chain_message_spread: int = Field(
        default=2, ge=1, description="A source that follows chains (``listing.next``: an API's cursor or page "
        "numbers) has the tasks of a round spread over up to this many Celery messages, as evenly as they go: a pool "
        "process follows its message's chains on one core, so one message of them all leaves the other processes "
        "idle, and one chain a message leaves each process one chain at a time. Set it to the worker processes that "
        "serve the source's queue.")
    batch_settle_interval_seconds: float = Field(
        default=0.1, ge=0, description="An HTTP batch whose pages are not all done after this settles those that "
        "ended, releases their leases and takes on more tasks of its source while its slow pages run "
        "(harvester.workers.refill); 0: a batch waits for all its pages, then settles them together. A wave starts "
        "at most publish_batch_size pages, so with two processes 0.5 s held a source over 2,000 hosts to about 57 "
        "pages/s where 0.1 s gave 163 (bench/broad_probe.py).")
    slow_request_lend_seconds: float = Field(
        default=1.0, ge=0, description="A request of a source with ``per_host_max_active`` that has waited this long "
        "for its site (a slow host, a timeout on its way) lends the source its ``max_active`` place back while it "
        "goes on: it keeps its host's place, so the site sees no more requests than it allows, and admission starts "
        "another task in its place (harvester.distributor.lending; at most twice max_active places lent). Only "
        "batches that refill (batch_settle_interval_seconds > 0) lend. 0: a request holds its place until it ends.")
    reap_batch_size: int = Field(default=1000, ge=1, description="Expired leases handled per source per reap.")
    redis_retry_max_seconds: float = Field(default=5.0, gt=0, description="Longest wait between Redis reconnects.")
    publish_grace_seconds: float = Field(
        default=30.0, gt=0,
        description="Admitted tasks a distributor has not confirmed published by then go back to intake, uncharged.")
    queued_lease_seconds: float = Field(
        default=3 * 3600.0, gt=0,
        description="A published task no worker started by then (its message lost) goes back to intake, uncharged; "
                    "keep it above celery_visibility_timeout_seconds.")
    dead_letters_max_per_source: int = Field(
        default=100_000, ge=1, description="Dead letters kept per source; older ones are dropped and counted.")
    host_pause_max_seconds: float = Field(
        default=3600.0, gt=0, description="Longest Retry-After pause honoured for one host (its record expires).")

    # Celery delivery: no fetch outside admission whatever Celery redelivers.
    celery_task_events: bool = Field(
        default=False, description="Workers send Celery task events from the start; off, they send them once "
                                   "Flower (or `celery control enable_events`) asks, so nobody pays for "
                                   "events nobody watches.")
    celery_visibility_timeout_seconds: float = Field(
        default=3600.0, gt=0,
        description="kombu hands an unacknowledged message out again after this; keep it above every batch's "
                    "time limit.")
    worker_max_memory_per_child_kb: int = Field(
        default=1_000_000, ge=10_000, description="A pool process using more than this is replaced after its batch.")

    # Producer runs (DESIGN.md section 6).
    producer_push_batch_size: int = Field(default=2000, ge=1, description="Tasks per pipelined intake push.")
    producer_poll_seconds: float = Field(default=15.0, gt=0, description="How often the harvest sensor looks.")
    producer_wait_timeout_seconds: float = Field(
        default=6 * 3600.0, gt=0, description="wait_for_harvest fails when a run takes longer than this."
    )
    producer_mongo_timeout_ms: int = Field(default=10_000, ge=100, description="MongoDB server selection timeout.")

    # Workers and scraping.
    body_size_cap_bytes: int = Field(default=5 * 1024 * 1024, ge=1024)
    max_redirects: int = Field(default=5, ge=0)
    max_request_body_bytes: int = Field(
        default=1024 * 1024, ge=64,
        description="The largest request body sent (a POST's JSON or form, with its secrets filled in); a larger "
                    "one is refused, never sent.")
    http2: bool = Field(
        default=False, description="HTTP/2 where a site offers it over TLS (through httpx); off: HTTP/1.1 through "
                                   "aiohttp, which costs about a fifth of the CPU per request.")
    max_value_length: int = Field(
        default=100_000, ge=16, description="Characters of one extracted value; a longer one is refused (too_long).")
    max_extracted_characters: int = Field(
        default=1_000_000, ge=1024, description="Characters one page may give all its attributes (too_large past it).")
    # Structured data: JSON-LD, <script> JSON and object literals, JSON responses.
    max_embedded_json_bytes: int = Field(
        default=2 * 1024 * 1024, ge=1024,
        description="Characters of one JSON-LD block or <script> blob that is parsed; a larger one is not "
                    "(its attributes report too_large). JSON responses are bounded by body_size_cap_bytes.")
    max_json_depth: int = Field(
        default=100, ge=2, le=900,
        description="Nesting of embedded JSON and JSON responses; deeper data is not parsed (too_deep). "
                    "MongoDB stores documents at most 100 levels deep.")
    max_url_length: int = Field(
        default=2048, ge=64, description="Longer links are ignored before they are canonicalised or matched.")
    output_sink: Literal["mongo", "discard"] = "mongo"
    contact_url: str = Field(
        default="", description="Where a site's operator learns who crawls them (HARVESTER_CONTACT_URL); "
                                "named in the default User-Agent. Set it in production.")
    user_agent: str = Field(
        default="", description="The User-Agent of every request; empty: Harvester/<version> (+contact_url).")

    # Hostile sites (docs/workers.md, "Fetch-side defences").
    max_retry_after_seconds: float = Field(
        default=3600.0, gt=0, description="The longest pause a Retry-After may ask for (a longer one is clamped).")
    allowed_private_networks: str = Field(
        default="",
        description="Comma-separated networks (CIDR, optionally :port) that may be fetched although they are "
                    "loopback, private or link-local: the local demo site, the tests. Empty: none.")
    robots_cache_seconds: float = Field(
        default=24 * 3600.0, gt=0, le=24 * 3600.0, description="How long a host's robots.txt is cached in Redis.")
    host_rate_max_wait_seconds: float = Field(
        default=30.0, gt=0, description="How long a request waits for its host's rate; past it the task is retried.")

    # Sitemaps: every cap holds per file or per run, whatever a site serves.
    sitemap_max_bytes: int = Field(
        default=50 * 1024 * 1024, ge=1024,
        description="Decoded bytes read of one sitemap (the protocol's 50 MB); the rest is not read (cut).")
    sitemap_max_urls: int = Field(
        default=50_000, ge=1, description="Entries read of one sitemap file (the protocol's 50,000); more are cut.")
    sitemap_max_depth: int = Field(
        default=3, ge=0, le=10, description="Levels of sitemap indexes followed below the sitemaps a source names.")
    sitemap_max_files_per_run: int = Field(
        default=1000, ge=1, description="Sitemap files one run reads; further ones are refused and counted.")
    sitemap_max_urls_per_run: int = Field(
        default=1_000_000, ge=1, description="Sitemap entries one run reads across its files; past it files are cut.")

    # Hostile sites, beyond the body and markup caps: every cap a counted, reported refusal (docs/workers.md).
    raw_body_cap_bytes: int = Field(
        default=20 * 1024 * 1024, ge=1024,
        description="Bytes read off the wire for one response, whatever they decode to (bytes that decode to "
                    "nothing included); past it the read stops: the page is cut, or refused when nothing decoded.")
    max_next_pages_per_page: int = Field(
        default=50, ge=1, description="Next listing pages one page may queue; the rest are ignored and counted.")
    max_listing_pages_per_run: int = Field(
        default=10_000, ge=1, description="Listing pages one run may discover (seeds not counted); past it "
                                          "next-page links are ignored and counted.")
    link_screening_max_hosts: int = Field(
        default=100, ge=1, description="Distinct hosts whose addresses are looked up when one page's links are "
                                       "screened; links to further hosts are dropped and counted.")
    link_screening_budget_seconds: float = Field(
        default=5.0, gt=0, description="How long screening one page's links may spend on DNS; links whose host "
                                       "did not resolve by then are dropped and counted.")
    max_attributes_per_element: int = Field(
        default=500, ge=16, le=999,
        description="Attributes one HTML element may have; a page with a wider element is refused before it is "
                    "parsed (libxml2 is quadratic in them; RE2, which counts them, repeats at most 1000 times).")
    max_elements_per_page: int = Field(
        default=300_000, ge=1000, description="Elements one HTML page may have; a page with more is refused before "
                                              "it is parsed.")
    robots_max_rules: int = Field(
        default=2000, ge=10, description="Allow/Disallow rules read from one robots.txt; later ones are dropped "
                                         "and counted.")
    robots_max_wildcards_per_rule: int = Field(
        default=10, ge=1, description="Wildcards kept in one robots.txt rule: a Disallow is cut after them (it "
                                      "then disallows more, never less), an Allow with more is dropped.")
    robots_last_good_seconds: float = Field(
        default=30 * 86_400.0, gt=0, description="While robots.txt answers 429, 5xx or not at all, the last copy "
                                                 "read is used this long (RFC 9309); without one nothing is fetched.")
    lost_message_check_seconds: float = Field(
        default=30.0, gt=0,
        description="How often the distributor looks for queued reservations whose Celery message is in neither "
                    "its queue nor kombu's unacked set; one missing from two looks this far apart goes back to "
                    "intake, uncharged (a worker killed between kombu's BRPOP and its unacked registration).")

    # Browsers and page slots (DESIGN.md section 5); the defaults are the seed's values.
    chromium_executable: Path = Path("/usr/bin/chromium")
    chromium_sandbox: bool = Field(
        default=False,
        description="Run Chromium in its own sandbox (needs a non-root user and user namespaces; "
                    "docker compose turns it on for worker-pageslots).")
    max_page_slots: int = Field(default=20, ge=0, description="Slots across every host (capped by live capacity).")
    min_scraping_tasks_by_pageslot: Fraction = Fraction(1, 3)
    page_slot_idle_seconds: float = Field(default=60.0, gt=0, description="A ready slot unused this long closes.")
    page_slot_relaunch_after_failures: int = Field(
        default=4, ge=1, description="Consecutive failed page loads after which the slot's browser is re-launched.")
    page_slot_give_up_after_failures: int = Field(
        default=7, ge=1, description="Consecutive failed page loads after which the slot goes back to NO_PAGE.")
    page_slot_retry_delay_seconds: float = Field(
        default=1.0, ge=0, description="Pause before a failed page load is tried again in a re-opened page.")
    page_slot_starving_seconds: float = Field(
        default=50.0, ge=0, description="Pending browser tasks waiting longer get their country a slot.")
    allocation_sample_size: int = Field(default=3000, ge=1, description="Recent browser tasks the allocator scores.")
    page_slot_heartbeat_seconds: float = Field(
        default=5.0, gt=0, description="Slot processes and slot hosts heartbeat this often; two missed = dead.")
    page_slot_claim_seconds: float = Field(
        default=60.0, gt=0, description="A prepared slot no worker process has claimed yet is reset after this "
        "long (its hosting task may wait behind busy processes; the next page_slots run prepares it again).")
    page_slot_recycle_after_pages: int = Field(
        default=500, ge=1, description="A slot's browser is re-launched after serving this many pages.")
    page_slot_reopen_page_after_pages: int = Field(
        default=10, ge=1, description="A slot opens a fresh page (and context) after this many pages: one page "
        "navigated for ever keeps growing its renderer (measured: 85 MB after 1 page, 195 MB after 60).")
    page_slot_recycle_rss_mb: float = Field(
        default=1024.0, gt=0, description="A slot's browser is re-launched when its process tree's RSS passes this.")
    block_window_seconds: float = Field(
        default=60.0, gt=0, description="Blocks of one host counted within this window pause it (block_pause_after); "
        "also the window a host's first slowed rate is measured over.")
    block_pause_after: int = Field(
        default=5, ge=1, description="Block pages of one host within block_window_seconds that pause the host for "
        "every worker.")
    block_pause_seconds: float = Field(
        default=60.0, gt=0, description="How long a host that blocked repeatedly is paused at admission.")
    block_recovery_seconds: float = Field(
        default=300.0, ge=0, description="A host's rate slowed by blocks doubles every this many seconds without a "
        "block (as well as a little with each clean page): a run that ended slowed does not start the next one "
        "slowed. 0: only clean pages raise it.")
    connect_timeout_seconds: float = Field(
        default=5.0, gt=0, description="A TCP (and TLS) connection not made within this is a connect timeout "
        "(outcome host_unreachable), apart from the source's timeout for the whole response: a dead host costs a "
        "task seconds, not the source's timeout. Every source's requests share it.")
    first_byte_timeout_seconds: float = Field(
        default=10.0, gt=0, description="A connected host that sends no response headers within this after the "
        "request is unreachable too (outcome host_unreachable). Every source's requests share it (a site that "
        "builds a large response before its headers needs it raised).")
    host_breaker_failures: int = Field(
        default=3, ge=1, description="Consecutive host_unreachable pages of one host (refused, DNS failing, connect "
        "or first-byte timeout) that open its circuit breaker: the host is paused at admission for every worker and "
        "its tasks deferred past the pause without spending a retry.")
    host_breaker_pause_seconds: float = Field(
        default=60.0, gt=0, description="How long an opened host breaker pauses its host; doubled at each "
        "opening in a row (a probe after the pause that fails again), up to host_pause_max_seconds.")
    host_breaker_deferrals: int = Field(
        default=4, ge=0, description="Openings in a row of one host's breaker during which its tasks are deferred "
        "without spending a retry; past them they spend retries as any failure (a host gone for good ends dead).")
    dns_cache_seconds: float = Field(
        default=3600.0, gt=0, description="How long the HTTP fetcher keeps a host's DNS answer (about a run): each "
        "new connection's peer is still checked against the address rules, so a rebound name is still refused.")
    block_markers: list[str] = Field(
        default_factory=list, description="Texts that mean the site blocked us, in any page of any source (HTTP "
        "or browser; matched case-insensitively), beside the built-in markers and each source's block section.")
    page_slot_allow_direct_connections: bool = Field(
        default=False, description="Local demos only: a country without a proxy browses directly instead of "
                                   "having its tasks dead-lettered.")
    page_slots_sensor_wait_seconds: float = Field(
        default=40.0, gt=0, description="How long the page_slots DAG's sensor waits for browser work before "
                                        "skipping the run (deferred: no worker slot held).")
    browser_snapshot_keep_days: float = Field(
        default=7.0, gt=0, le=365, description="How long a failed or rejected browser page's snapshot (HTML and "
                                               "screenshot, linked from its dead letter) is kept.")
    browser_snapshot_max_bytes: int = Field(
        default=2 * 1024 * 1024, ge=16 * 1024, le=15 * 1024 * 1024,
        description="The most one snapshot keeps: its screenshot when it fits in half, its HTML cut to the rest.")
    evidence_max_pages_per_run: int = Field(
        default=500, ge=1, description="Snapshots of failed or rejected pages kept per run; past it (or past "
                                       "evidence_max_bytes_per_run) a run's further evidence is counted, not kept.")
    evidence_max_bytes_per_run: int = Field(
        default=256 * 1024 * 1024, ge=1024 * 1024, description="Bytes of evidence (HTML and screenshots) kept per run.")
    evidence_max_pages_per_source: int = Field(
        default=2000, ge=1, description="Snapshots kept per source at once (for browser_snapshot_keep_days); past "
                                        "it, or past evidence_max_bytes_per_source, new evidence is counted, not kept.")
    evidence_max_bytes_per_source: int = Field(
        default=1024 * 1024 * 1024, ge=1024 * 1024, description="Bytes of evidence kept per source at once.")
    archive_location: str = Field(
        default_factory=lambda: "file://" + str(REPOSITORY_ROOT / "var" / "archive"),
        description="Where sources' WARC archives go unless a source's output.archive.location says (a URL: "
                    "file:///data/archive, s3://bucket/prefix).")
    archive_write_timeout_seconds: float = Field(
        default=30.0, gt=0, le=600, description="How long a batch waits for its archive write; past it the gap "
                                                "is counted (or the batch retried when the archive is required).")
    archive_index_flush_seconds: float = Field(
        default=2.0, ge=0, le=60,
        description="How long an archived page's index row may wait to be inserted with others (one insert for "
                    "many batches; the rows are journalled beside local archive files meanwhile, so a killed worker's "
                    "rows are put in by the next writer). 0: each batch's rows are inserted with it.")
    archive_digest_filter_bits: int = Field(
        default=8 * 1024 * 1024, ge=0, le=2**32,
        description="Bits of each archived source's Bloom filter of payload digests in Redis (8,388,608: 1 MiB a "
                    "source, about 1 false positive in 2,000 at 500,000 payloads): a payload it has not seen is "
                    "archived without asking the index whether it is a revisit. 0: every page is looked up.")
    reextract_processes: int = Field(
        default=0, ge=0, le=256,
        description="Processes a re-extraction reads its archived pages in (parsed and extracted; forked from its "
                    "own, which reads the files and writes the records meanwhile). 0: one per CPU; 1: in its own "
                    "process. A window under 200 pages is always read in its own process.")
    page_slot_task_wait_seconds: float = Field(
        default=1.0, gt=0, description="How long a ready slot blocks waiting for a task before it heartbeats.")

    # Scale: 5,000 sources on one deployment.
    source_cache_dir: Path | None = Field(
        default_factory=lambda: Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harvester",
        description="Validated sources are cached here, keyed by each file's bytes, so a DAG parse of unchanged "
                    "files does no YAML or schema work (harvester.config.cache); empty: no cache.")
    metrics_detailed_sources: int | None = Field(
        default=None, ge=0,
        description="At thousands of sources: only the N sources with the most requests keep both histograms, "
                    "their limits and saturations per source (the others' histograms are summed into "
                    'source="_other"); unset: every source does (about 50 series a source).')
    metadata_retention_days: float = Field(
        default=30.0, gt=0,
        description="`harvester metadata-cleanup` removes runs of page_slots and harvest_* older than this "
                    "from Airflow's metadata database (the latest scheduled run of each DAG stays).")

    # Redis failover: Redis Sentinel for the broker, the rate-limit store and the slot records.
    redis_sentinels: str = Field(
        default="",
        description="Comma-separated host:port of Redis Sentinels. Set: every Redis client of HARVESTER_REDIS_URL "
                    "and the Celery broker ask them for the current primary of redis_sentinel_master (the URL "
                    "then gives only the password, database and TLS); empty: HARVESTER_REDIS_URL is the server.")
    redis_sentinel_master: str = Field(
        default="harvester", min_length=1,
        description="The service name the sentinels monitor (`sentinel monitor <name> ...`).")
    redis_sentinel_password: str = Field(
        default="", repr=False,
        description="The sentinels' own password (their `requirepass`); empty: they need none. The primary's "
                    "password stays in HARVESTER_REDIS_URL.")

    # Observability.
    metrics_port: int = Field(default=0, ge=0, le=65535,
                              description="The distributor serves Prometheus metrics here (0: off).")
    metrics_host: str = Field(default="127.0.0.1", description="Address of the metrics server (0.0.0.0 in compose).")

    @field_validator("min_scraping_tasks_by_pageslot", mode="before")
    @classmethod
    def _parse_fraction(cls, value: object) -> Fraction:
        """Accept "1/3" or 0.25 so an exact fraction survives an environment variable."""
        return Fraction(str(value)) if not isinstance(value, Fraction) else value


    @field_validator("source_cache_dir", mode="before")
    @classmethod
    def _empty_path_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("user_agent", mode="after")
    @classmethod
    def _default_user_agent(cls, value: str, info: ValidationInfo) -> str:
        """An honest default: the crawler's name, version and where to reach its operator."""
        if value:
            return value
        contact = info.data.get("contact_url") or ""
        return f"Harvester/{HARVESTER_VERSION} (+{contact})" if contact else f"Harvester/{HARVESTER_VERSION}"


@lru_cache(maxsize=1)
def get_settings() -> HarvesterSettings:
    """The process-wide settings, read once from the environment."""
    return HarvesterSettings()
