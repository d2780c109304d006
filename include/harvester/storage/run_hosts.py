"""One run's figures per site host, given as counts and a short list, never as a metric series per host.

A source over thousands of sites needs to know how many hosts its run met, how many are done, how many wait out a
pause and which are the slowest. The workers add each batch's fetches, fetch time and unreachable fetches per host
to one hash per run (:meth:`RunHosts.queue_add`, on the batch's own pipeline). A reader joins that hash with the
live host state the distributor and the workers keep for the source (hosts with tasks queued in their own queue,
tasks in flight, hosts paused at admission by a Retry-After, repeated blocks or an open breaker, hosts slowed
after blocks) into :class:`HostFigures`: counts and the :data:`SLOWEST_HOSTS` slowest hosts by mean fetch time.
The run's report keeps them, the Harvester page shows them and the metrics export the counts with a bounded
``state`` label, so the series stay a handful per source whatever the number of hosts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from harvester.errors import redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import text
from harvester.storage.url_store import RUN_KEYS_SECONDS

SLOWEST_HOSTS = 5  # hosts named in the report, on the page and behind the slowest-host gauge
HOST_READS = 6  # replies queue_read queues per source, in order
PAGES = "pages"
SECONDS = "seconds"
UNREACHABLE = "unreachable"


@dataclass
class HostFetches:
    """What one host saw in one run: fetches, their total time (s) and those that reached nothing."""

    pages: int = 0
    seconds: float = 0.0
    unreachable: int = 0

    @property
    def mean_seconds(self) -> float:
        return self.seconds / self.pages if self.pages else 0.0


@dataclass
class HostFigures:
    """A run's hosts: how many it fetched from, what they are doing now, and the slowest of them."""

    hosts: int = 0  # hosts the run fetched from
    done: int = 0  # of them, hosts with no task queued for them, in flight or paused now
    waiting: int = 0  # of them, hosts with tasks in their own queue (held for the host's politeness or pause)
    in_flight: int = 0  # of them, hosts with tasks in flight now
    paused: int = 0  # hosts of the source paused at admission now (Retry-After, repeated blocks, an open breaker)
    unreachable: int = 0  # hosts of the source behind an open breaker now (unreachable in a row)
    slowed: int = 0  # hosts of the source whose request rate blocks lowered
    slowest: list[dict[str, Any]] = field(default_factory=list)  # host, pages, mean_seconds, unreachable

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def slowest_mean_seconds(self) -> float:
        return float(self.slowest[0]["mean_seconds"]) if self.slowest else 0.0


def host_fetches(raw: Mapping[bytes | str, bytes | str]) -> dict[str, HostFetches]:
    """The run's hash read back: host -> its figures."""
    hosts: dict[str, HostFetches] = {}
    for raw_field, value in raw.items():
        host, _, figure = text(raw_field).rpartition("|")
        entry = hosts.setdefault(host, HostFetches())
        if figure == PAGES:
            entry.pages = int(float(value))
        elif figure == SECONDS:
            entry.seconds = float(value)
        elif figure == UNREACHABLE:
            entry.unreachable = int(float(value))
    return hosts


def slowest_hosts(hosts: Mapping[str, HostFetches], limit: int = SLOWEST_HOSTS) -> list[dict[str, Any]]:
    """The ``limit`` hosts with the highest mean fetch time (ties by name), with their pages and unreachable."""
    ranked = sorted(((host, entry) for host, entry in hosts.items() if entry.pages),
                    key=lambda item: (-item[1].mean_seconds, item[0]))
    return [{"host": host, "pages": entry.pages, "mean_seconds": round(entry.mean_seconds, 3),
             "unreachable": entry.unreachable} for host, entry in ranked[:limit]]


def host_figures(replies: list[Any], now: float) -> HostFigures:
    """:class:`HostFigures` from the replies :meth:`RunHosts.queue_read` queued, ``now`` the Redis clock."""
    run_hosts, ready, in_flight, paused, breakers, slowed = replies
    fetched = host_fetches(run_hosts)
    waiting_hosts = {text(host) for host in ready}
    flying_hosts = {text(host) for host in in_flight}
    paused_hosts = {text(host) for host, until in paused.items() if text(host) and float(until) > now}
    breaker_open = {text(name).rpartition("|")[0] for name, until in breakers.items()
                    if text(name).endswith("|until") and float(until) > now}
    busy = waiting_hosts | flying_hosts | paused_hosts
    return HostFigures(hosts=len(fetched), done=sum(1 for host in fetched if host not in busy),
                       waiting=sum(1 for host in fetched if host in waiting_hosts),
                       in_flight=sum(1 for host in fetched if host in flying_hosts),
                       paused=len(paused_hosts), unreachable=len(breaker_open), slowed=int(slowed),
                       slowest=slowest_hosts(fetched))


class RunHosts:
    """The per-run host hash: written by the workers' batches, read with the live host state."""

    FIELDS_PER_HOST = 3  # at most (pages, seconds, unreachable): a hash with more holds several hosts

    def __init__(self, redis_client: redis.Redis, ttl_seconds: int = RUN_KEYS_SECONDS) -> None:
        self.redis = redis_client
        self.ttl = ttl_seconds

    def queue_add(self, pipeline: redis.client.Pipeline, source: str, run_id: str | None,
                  hosts: Mapping[str, HostFetches]) -> None:
        """Queue one batch's figures per host on the caller's pipeline (the batch sends them with its counters),
        and name this run as the one the source's live figures come from."""
        if not hosts:
            return
        keys = SourceKeys(source)
        key = keys.run_hosts(run_id)
        for host, entry in hosts.items():
            pipeline.hincrby(key, f"{host}|{PAGES}", entry.pages)
            pipeline.hincrbyfloat(key, f"{host}|{SECONDS}", round(entry.seconds, 6))
            if entry.unreachable:
                pipeline.hincrby(key, f"{host}|{UNREACHABLE}", entry.unreachable)
        pipeline.expire(key, self.ttl)
        pipeline.set(keys.hosts_run, run_id or "adhoc", ex=self.ttl)

    @staticmethod
    def queue_read(pipeline: redis.client.Pipeline, source: str, run_id: str | None) -> None:
        """Queue the :data:`HOST_READS` reads :func:`host_figures` takes, in its order."""
        keys = SourceKeys(source)
        pipeline.hgetall(keys.run_hosts(run_id))
        pipeline.zrange(keys.host_ready, 0, -1)
        pipeline.hkeys(keys.host_active_counts)
        pipeline.hgetall(keys.host_paused)
        pipeline.hgetall(keys.host_breakers)
        pipeline.hlen(keys.host_throttles)

    @redis_storage_errors()
    def read(self, source: str, run_id: str | None) -> HostFigures:
        """The run's host figures now (one round trip)."""
        pipeline = self.redis.pipeline(transaction=False)
        self.queue_read(pipeline, source, run_id)
        pipeline.time()
        *replies, (seconds, microseconds) = pipeline.execute()
        return host_figures(replies, seconds + microseconds / 1_000_000)
