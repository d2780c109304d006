"""Every Redis key name Harvester uses, in one place.

Keys of one source share the hash tag ``{source}`` so that the Lua scripts touching several keys of
one source stay valid on Redis Cluster (DESIGN.md section 10).
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "harvester"

# Keys that span sources (never touched by a per-source Lua script).
SOURCES_INDEX = f"{PREFIX}:sources"  # set of sources that have ever had intake
INTAKE_SIGNAL = f"{PREFIX}:intake-signal"  # list the distributor blocks on to wake at new intake
PAGE_SLOTS_INDEX = f"{PREFIX}:pageslots"  # hash slot id -> JSON slot record


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
    def window(self) -> str:
        """Sorted set of admission times in the rolling rate window."""
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
        """Hash: the source's limits, queue, priority and retries (Intake.register_source writes it)."""
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
    def host_paused(self) -> str:
        """Hash: host -> time until which admission to that host waits (Retry-After per host)."""
        return self._key("host-paused")

    @property
    def run_dead(self) -> str:
        """Hash: run id (and "run id|package id") -> tasks of that run now in dead letters."""
        return self._key("run-dead")

    def run_listing_pages(self, run_id: str | None) -> str:
        """Set of listing-page URLs already queued in one run (pagination never loops)."""
        return self._key(f"run:{run_id or 'adhoc'}:listings")

    def run_new_urls(self, run_id: str | None) -> str:
        """Counter of new detail URLs discovered in one run (the listing's max_new_urls)."""
        return self._key(f"run:{run_id or 'adhoc'}:new-urls")

    def host_active(self, host: str) -> str:
        """Sorted set: task id -> lease deadline, per host (politeness, like Scrapy's slots)."""
        return self._key(f"host:{host}:active")

    def host_paused_until(self, host: str) -> str:
        return self._key(f"host:{host}:paused-until")
