"""Every Redis key name Harvester uses, in one place.

Keys of one source share the hash tag ``{source}`` so that the Lua scripts touching several keys of
one source stay valid on Redis Cluster (DESIGN.md section 10).
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "harvester"

# Keys that span sources (never touched by a per-source Lua script).
ROBOTS_PREFIX = f"{PREFIX}:robots"  # + ":<scheme>://<host>[:port]": a host's robots.txt (JSON), expiring
SOURCES_INDEX = f"{PREFIX}:sources"  # set of sources that have ever had intake
INTAKE_SIGNAL = f"{PREFIX}:intake-signal"  # list the distributor blocks on to wake at new intake
# set of sources whose intake or delayed retries may hold tasks: added after every write that gives a source
# work, removed by a distributor that finds none (harvester.distributor.ready_work)
SOURCES_WITH_WORK = f"{PREFIX}:sources-with-work"
# set of sources with tasks reserved or leased (an active zset not empty): the ones the reaper looks at; admission
# adds, the reaper removes one it finds with none (harvester.distributor.ready_work.LeasedSources)
SOURCES_WITH_LEASES = f"{PREFIX}:sources-with-leases"


def distributor_heartbeat(name: str) -> str:
    """String: unix time of the last round of the distributor ``name`` (its liveness check reads it)."""
    return f"{PREFIX}:distributor:{name}:heartbeat"


@dataclass(frozen=True, slots=True)
class SourceKeys:
    """The keys of one source, all in the same Redis Cluster hash slot."""

    source: str

    def _key(self, name: str) -> str:
        return f"{PREFIX}:{{{self.source}}}:{name}"

    @property
    def intake(self) -> str:
        """List of task messages waiting for admission."""
        return self._key("intake")

    @property
    def delayed(self) -> str:
        """Sorted set: task message -> due time (retries with backoff)."""
        return self._key("delayed")

    @property
    def active(self) -> str:
        """Sorted set: task id -> lease deadline."""
        return self._key("active")

    @property
    def active_messages(self) -> str:
        """Hash: task id -> task message, so a reaped lease can be put back in intake."""
        return self._key("active-messages")

    @property
    def leases(self) -> str:
        """Hash: task id -> "<state>|<fencing token>" of every task in ``active``; state ``a`` admitted (not yet
        confirmed published), ``q`` queued in Celery, ``s`` started by a worker. Only the holder of the
        matching token may heartbeat, release or fail the task."""
        return self._key("leases")

    @property
    def worker_lost(self) -> str:
        """Hash: task id -> batches that died with the task started (a batch that kills its worker twice is
        dead-lettered, never looped); an entry goes when its task settles."""
        return self._key("worker-lost")

    @property
    def window(self) -> str:
        """Sorted set of fetch starts (a worker takes one per request) in the rolling rate window."""
        return self._key("window")

    @property
    def paused_until(self) -> str:
        """Retry-After for the whole source: admission waits until this time."""
        return self._key("paused-until")

    @property
    def dead_letters(self) -> str:
        """List of JSON {message, reason, failed_at}."""
        return self._key("dead")

    @property
    def counters(self) -> str:
        """Hash of running totals: admitted, done, failed, dead, outcome:<name>."""
        return self._key("counters")

    @property
    def seen_urls(self) -> str:
        """Prefix of the duplicate-URL checker's per-URL keys (each expires after the harvesting lag)."""
        return self._key("seen")

    @property
    def config(self) -> str:
        """Hash: the source's registered copy: its limits, routing, validated config and version (SourceRegistry)."""
        return self._key("config")

    @property
    def active_hosts(self) -> str:
        """Hash: task id -> host of an active task (per-host politeness)."""
        return self._key("active-hosts")

    @property
    def host_active_counts(self) -> str:
        """Hash: host -> tasks of this source in flight on that host."""
        return self._key("host-active-counts")

    @property
    def lent_places(self) -> str:
        """Sorted set: task id -> time its batch lent the source its ``max_active`` place (s): a request that waited
        past ``slow_request_lend_seconds`` keeps its host's place but no longer holds one of the source's, so a slow
        or dead host holds nobody up (``distributor/lua/lend_places.lua``); the entry goes with the lease."""
        return self._key("lent-places")

    @property
    def host_paused(self) -> str:
        """Hash: host -> time until which admission to that host waits (Retry-After per host)."""
        return self._key("host-paused")

    @property
    def host_ready(self) -> str:
        """Sorted set: host with tasks waiting in its own queue -> time its next task may be admitted (s); admission
        takes hosts in this order, so a source over many hosts is served round-robin."""
        return self._key("host-ready")

    @property
    def host_parked(self) -> str:
        """String: tasks waiting in the hosts' own queues (intake's length does not count them)."""
        return self._key("host-parked")

    @property
    def host_next_admission(self) -> str:
        """Sorted set: host -> earliest time its next task may be admitted (``per_host_per_minute`` spacing, s)."""
        return self._key("host-next-admission")

    @property
    def host_queue_prefix(self) -> str:
        """Prefix of the hosts' queues: ``host_queue_prefix + host`` is :meth:`host_queue`."""
        return self._key("host-queue:")

    def batch_holdings(self, first_task_id: str) -> str:
        """Hash: task id -> token of the tasks a refilling batch took on (queued, from intake, a chain's next) beside
        its message's own, under the first of its own task ids: if its worker process dies, the lost-batch handler
        (which knows only the message) counts the kill for them too (harvester.workers.lost). Deleted when the batch
        ends, expiring otherwise."""
        return self._key(f"holdings:{first_task_id}")

    @property
    def archived_digests(self) -> str:
        """String (a bitmap): the Bloom filter of the payload digests the source archived, bit 0 set once it holds
        the whole archive index (harvester.storage.archive_digests); dropped by the archive's clean-up."""
        return self._key("archived-digests")

    @property
    def archived_digests_build(self) -> str:
        """String, expiring: the process building :attr:`archived_digests` from the index (one at a time)."""
        return self._key("archived-digests-build")

    def host_queue(self, host: str) -> str:
        """List: one host's tasks taken out of intake while the host could not take them, oldest first."""
        return self.host_queue_prefix + host

    @property
    def requests(self) -> str:
        """Hash: "<outcome>|<HTTP status>" -> requests the workers made (harvester.metrics.recording)."""
        return self._key("requests")

    @property
    def histograms(self) -> str:
        """Hash: "<histogram>:<upper bound>", "<histogram>:sum", "<histogram>:count" -> observations (workers)."""
        return self._key("histograms")

    @property
    def extraction_health(self) -> str:
        """Hash: attribute -> JSON {share, median, drop, drift} of the last reported run (producer report)."""
        return self._key("extraction-health")

    @property
    def run_quality(self) -> str:
        """Hash: the last reported run's outcome (green, degraded, failed), reason, shares (exported between runs)."""
        return self._key("run-quality")

    @property
    def run_dead(self) -> str:
        """Hash: run id (and "run id|package id") -> tasks of that run now in dead letters."""
        return self._key("run-dead")

    @property
    def run_site_requests(self) -> str:
        """Hash: "run id|pages" and "run id|sub_requests" -> browser pages of that run and the requests they
        made to their own site besides their navigation (the run report shows them; dropped when it is written)."""
        return self._key("run-site-requests")

    def run_listing_pages(self, run_id: str | None) -> str:
        """Set of listing-page URLs already queued in one run (pagination never loops)."""
        return self._key(f"run:{run_id or 'adhoc'}:listings")

    def run_listing_count(self, run_id: str | None) -> str:
        """Counter of listing pages discovered in one run (max_listing_pages_per_run)."""
        return self._key(f"run:{run_id or 'adhoc'}:listing-count")

    def run_new_urls(self, run_id: str | None) -> str:
        """Counter of new detail URLs discovered in one run (the listing's max_new_urls)."""
        return self._key(f"run:{run_id or 'adhoc'}:new-urls")

    def run_sitemaps(self, run_id: str | None) -> str:
        """Counter of sitemap files queued in one run (sitemap_max_files_per_run)."""
        return self._key(f"run:{run_id or 'adhoc'}:sitemaps")

    def run_sitemap_entries(self, run_id: str | None) -> str:
        """Counter of sitemap entries read in one run (sitemap_max_urls_per_run)."""
        return self._key(f"run:{run_id or 'adhoc'}:sitemap-entries")

    @property
    def proxy_tiers_traffic(self) -> str:
        """Hash: "proxy_tier_requests:<tier>" and "proxy_tier_bytes:<tier>" -> requests and response bytes the
        source's proxy tiers carried, ever (each run's own are in its figures)."""
        return self._key("proxy-tiers-traffic")

    def run_figures(self, run_id: str | None) -> str:
        """Hash: figure -> amount of one run that only workers see (sitemaps read, URLs they listed and
        skipped as unchanged, bytes a 304 saved); the run's report reads it."""
        return self._key(f"run:{run_id or 'adhoc'}:figures")

    def run_hosts(self, run_id: str | None) -> str:
        """Hash: per site host of one run, ``HOST|pages`` (fetches), ``HOST|seconds`` (their fetch time) and
        ``HOST|unreachable`` (fetches that reached nothing): the run's per-host figures (harvester.storage.RunHosts)."""
        return self._key(f"run:{run_id or 'adhoc'}:hosts")

    @property
    def hosts_run(self) -> str:
        """String: the run whose per-host figures the workers wrote last (the metrics and the page read that run's)."""
        return self._key("hosts-run")

    def run_sitemap_problems(self, run_id: str | None) -> str:
        """List of JSON {url, problem} (capped): the sitemaps of one run that were cut or refused."""
        return self._key(f"run:{run_id or 'adhoc'}:sitemap-problems")

    def host_fetch_window(self, host: str) -> str:
        """Sorted set: request starts on ``host`` in the rolling window (per_host_per_minute, crawl delay)."""
        return self._key(f"host:{host}:fetch-window")

    def host_fetch_active(self, host: str) -> str:
        """Sorted set: requests in flight on ``host`` -> deadline (per_host_max_active at fetch time)."""
        return self._key(f"host:{host}:fetch-active")

    @property
    def host_throttles(self) -> str:
        """Hash: host -> requests per minute the host is slowed to after blocks (absent: not slowed)."""
        return self._key("host-throttles")

    @property
    def host_breakers(self) -> str:
        """Hash: per host with connection failures, ``HOST|failures`` (in a row), ``HOST|until`` (the breaker is
        open until, s) and ``HOST|openings`` (in a row); a host's fields go at its first success."""
        return self._key("host-breakers")

    def host_blocks(self, host: str) -> str:
        """Sorted set: block pages seen on ``host`` in the block window (member -> time, s): repeated blocks
        pause the host."""
        return self._key(f"host:{host}:blocks")


@dataclass(frozen=True, slots=True)
class PageSlotKeys:
    """The keys of the page slots (DESIGN.md section 5), all under the hash tag ``{pageslots}`` so every
    slot transition, the task bookkeeping and the per-country task lists stay in one Lua call."""

    def _key(self, name: str) -> str:
        return f"{PREFIX}:{{pageslots}}:{name}"

    def slot(self, slot_id: str) -> str:
        """Hash: one slot record (id, country, state, host, process_id, browser_pid, pages_served, ...)."""
        return self._key(f"slot:{slot_id}")

    @property
    def slot_prefix(self) -> str:
        """What :meth:`slot` puts before the slot id (Lua scripts build slot keys from ids)."""
        return self._key("slot:")

    @property
    def all_slots(self) -> str:
        """Set of every slot id."""
        return self._key("slots")

    def country_slots(self, country: str) -> str:
        """Set of the slot ids of one country (the per-country index)."""
        return self._key(f"country:{country}")

    @property
    def country_slots_prefix(self) -> str:
        return self._key("country:")

    @property
    def slot_sequence(self) -> str:
        """Counter that numbers new slots."""
        return self._key("sequence")

    def browser_tasks(self, country: str) -> str:
        """List of admitted browser task messages (JSON) of one country, waiting for a slot of it."""
        return self._key(f"tasks:{country}")

    @property
    def browser_tasks_prefix(self) -> str:
        return self._key("tasks:")

    @property
    def recent_tasks(self) -> str:
        """Sorted set: "source|task id" -> when it was last admitted (the allocator's sample, capped)."""
        return self._key("recent")

    @property
    def recent_task_states(self) -> str:
        """Hash: "source|task id" -> "country|state|admitted at" (state pending, running or completed)."""
        return self._key("recent-states")

    @property
    def hosts(self) -> str:
        """Sorted set: slot host -> heartbeat deadline (a host past it is not live)."""
        return self._key("hosts")

    @property
    def host_capacity(self) -> str:
        """Hash: slot host -> slots it can host (its worker concurrency)."""
        return self._key("host-capacity")

    @property
    def last_decision(self) -> str:
        """String: JSON of the allocator's last decision (shown by `harvester slots`)."""
        return self._key("last-decision")

    @property
    def proxy_bytes(self) -> str:
        """Hash: "country:<C>" and "source:<name>" -> bytes browsed through the country's proxy."""
        return self._key("proxy-bytes")

    def proxy_health(self, country: str) -> str:
        """Hash: the health of one country's proxy pool, shared by every worker: "<connection id>|failures"
        (consecutive), "|out_until" (server time, s), "|requests", "|errors", "|bans", "|bytes" (ever), and
        "#turn" (rotation)."""
        return self._key(f"proxy-health:{country}")

    def proxy_bans(self, country: str) -> str:
        """Hash: "<connection id>|<host>" -> server time (s) until which that host's requests prefer the country's
        other proxies (it blocked this one); the hash expires as a whole after the last ban's length."""
        return self._key(f"proxy-bans:{country}")

    def proxy_tiers(self, source: str) -> str:
        """Hash: one source's proxy tier at each site host, shared by every worker: "<host>|tier" (index, 0 the
        cheapest), "|since" (server time of the last move), "|hot:<tier>" (server time until which that tier
        stays above the host), "|strikes:<tier>", "|blocks:<tier>", "|moves_up", "|moves_down"; it expires as a
        whole a while after the last block."""
        return self._key(f"proxy-tiers:{source}")


def robots_key(origin: str) -> str:
    """A host's cached robots.txt (``origin`` is ``scheme://host[:port]``); it expires within 24 h."""
    return f"{ROBOTS_PREFIX}:{origin}"


def robots_last_good_key(origin: str) -> str:
    """The last robots.txt of a host that answered 2xx (JSON), used while the file fails (RFC 9309); it
    expires after ``robots_last_good_seconds``."""
    return f"{ROBOTS_PREFIX}-last-good:{origin}"
