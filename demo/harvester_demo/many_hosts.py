"""A loopback web of many hosts (distinct 127.x.y.z addresses, one port) served by one process: what one source over
many sites meets, for bench/broad.py and tests/producer/test_broad_dag.py. Run it as
``python -m harvester_demo.many_hosts --port P --control-port C [--hosts N]``; it prints ``listening`` once up.

Host ``i`` lives at :func:`host_address` (``i``). Its kind follows from ``i``: every twentieth host refuses
connections (nothing listens on its address), every twentieth from the tenth answers after ``--slow-seconds``,
the rest answer in 50-500 ms (fixed per host). ``--live-only`` binds the normal hosts alone (the run without
dead and slow hosts). The server counts what a crawler did, per host, as the site would see it: pages served
by kind, and politeness violations (a request starting while another is in flight at the host, or more than
``--per-minute`` request starts at the host in any 60 s). A request is in flight until it is answered or the client
hangs up on it (a crawler's first-byte timeout): a slow host's handler is then cancelled. ``GET /_stats`` on the
control address gives them; ``POST /_reset`` starts a new count. ``violating_hosts`` names the hosts of the
violations (address: count), and ``requests_by_kind`` counts requests (robots.txt included) by host kind.
``live_span`` is the seconds from the first request the hosts saw to the last live page served: every crawler is
timed by the same clock, without its own start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time
from typing import Any

from aiohttp import web

CONTROL_ADDRESS = "127.0.0.1"
NETWORK = "127.20.0.0/16"  # every host_address


def host_address(index: int) -> str:
    """127.20.x.y: away from 127.0.0.1, where the benches' and tests' own servers listen. A crawler of these
    addresses must allow them (``HARVESTER_ALLOWED_PRIVATE_NETWORKS``: :data:`NETWORK`)."""
    return f"127.20.{index // 250}.{index % 250 + 1}"


def host_kind(index: int) -> str:
    if index % 20 == 0:
        return "dead"
    if index % 20 == 10:
        return "slow"
    return "normal"


def host_latency(index: int) -> float:
    """50-500 ms, the same for a host at every run."""
    return 0.05 + ((index * 7919) % 451) / 1000


class Counts:
    """What the hosts saw of one crawler."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.reset()

    def reset(self) -> None:
        self.served: collections.Counter[str] = collections.Counter()
        self.requests = 0
        self.violations = 0
        self.violating_hosts: collections.Counter[str] = collections.Counter()
        self.requests_by_kind: collections.Counter[str] = collections.Counter()
        self.in_flight: collections.Counter[int] = collections.Counter()
        self.starts: dict[int, collections.deque[float]] = collections.defaultdict(collections.deque)
        self.first = self.last_live = 0.0

    def start(self, index: int) -> None:
        now = time.monotonic()
        self.first = self.first or now
        self.requests += 1
        starts = self.starts[index]
        while starts and starts[0] <= now - 60:
            starts.popleft()
        self.requests_by_kind[host_kind(index)] += 1
        if self.in_flight[index] > 0 or len(starts) >= self.per_minute:
            self.violations += 1
            self.violating_hosts[host_address(index)] += 1
        starts.append(now)
        self.in_flight[index] += 1

    def end(self, index: int, kind: str, page: bool) -> None:
        self.in_flight[index] -= 1
        if page:
            self.served[kind] += 1
            if kind == "normal":
                self.last_live = time.monotonic()

    def figures(self) -> dict[str, Any]:
        return {"served": dict(self.served), "requests": self.requests, "violations": self.violations,
                "violating_hosts": dict(self.violating_hosts), "requests_by_kind": dict(self.requests_by_kind),
                "live_span": self.last_live - self.first if self.first else 0.0}


def page_html(index: int, page: int) -> str:
    return (f"<html><head><title>Host {index} page {page}</title></head><body><h1>Host {index} page {page}</h1>"
            f"<p class='price'>{index}.{page:02d}</p></body></html>")


def host_app(index: int, counts: Counts, slow_seconds: float) -> web.Application:
    kind = host_kind(index)
    delay = slow_seconds if kind == "slow" else host_latency(index)

    async def handle(request: web.Request) -> web.Response:
        page = request.path.startswith("/page/")
        answered = False
        counts.start(index)
        try:
            if request.path == "/robots.txt":
                return web.Response(text="User-agent: *\nAllow: /\n")
            await asyncio.sleep(delay)  # cancelled when the client hangs up (the runners' handler_cancellation)
            answered = True
            if not page:
                return web.Response(status=404, text="not found")
            return web.Response(text=page_html(index, int(request.path.rsplit("/", 1)[1])), content_type="text/html")
        finally:
            counts.end(index, kind, page and answered)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    return app


async def serve(arguments: argparse.Namespace) -> None:
    counts = Counts(arguments.per_minute)
    runners = []
    for index in range(arguments.hosts):
        kind = host_kind(index)
        if kind == "dead" or (arguments.live_only and kind != "normal"):
            continue  # nothing listens: connections are refused
        # a request the client gave up on (its first-byte timeout) ends when it hangs up, as a site sees it
        runner = web.AppRunner(host_app(index, counts, arguments.slow_seconds), access_log=None,
                               handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, host_address(index), arguments.port, backlog=256).start()
        runners.append(runner)

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(counts.figures())

    async def reset(_: web.Request) -> web.Response:
        counts.reset()
        return web.json_response({"reset": True})

    control = web.Application()
    control.router.add_get("/_stats", stats)
    control.router.add_post("/_reset", reset)
    runner = web.AppRunner(control, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, CONTROL_ADDRESS, arguments.control_port).start()
    print("listening", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--per-minute", type=int, default=30)
    parser.add_argument("--slow-seconds", type=float, default=10.0)
    parser.add_argument("--live-only", action="store_true")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
