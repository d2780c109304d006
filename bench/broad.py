"""Broad crawl: one source over many hosts, with slow and dead hosts, against Scrapy's broad-crawl settings.

A loopback web (harvester_demo.many_hosts: ``--hosts`` hosts on distinct 127.20.x.y addresses, one process) of
``--pages`` pages a host; 5 % of hosts refuse connections, 5 % answer after 10 s, the rest in 50-500 ms.
Politeness: one request in flight and 30 request starts a minute per host, counted by the server.

- Harvester: one source (``per_host_max_active: 1``, ``per_host_per_minute: 30``), its page URLs pushed to its
  intake host by host, a distributor and ``--workers`` Celery processes; the time until the server served every
  live page -> ``pages_per_s``. The same crawl on a web of the live hosts alone gives ``dead_host_cost``
  (goal <= 1.10): the wall time with the dead and slow hosts over without them.
- Scrapy (bench/broad_scrapy_peer.py, installed for the bench only under var/bench-peers/) with its documented
  broad-crawl settings (``DownloaderAwarePriorityQueue``, one request per domain, ``DOWNLOAD_DELAY = 2``,
  retries as ours) -> ``scrapy_pages_per_s``, ``broad_ratio`` = ours over Scrapy's (goal >= 1.5).
- crawlee-python (bench/broad_crawlee_peer.py, installed as bench/crawl.py installs it) with its per-domain
  throttling (``ThrottlingRequestManager``, a 2 s crawl delay per host) -> ``broad_crawlee_ratio`` (goal >= 1.0).
- Every crawler is timed by the server: from the first request it saw to the last live page served. A peer
  still short of the live pages at ``--timeout`` is stopped and measured on what it served over that time
  (named in ``peers_timed_out``): at 2,000 hosts crawlee-python served 9,008 of 18,000 in 20 minutes.
- ``politeness_violations``: what the server counted over both crawlers (goal 0); CPU per live page of each.

Usage: .venv/bin/python bench/broad.py [--hosts 2000] [--pages 10] [--concurrency 64] [--workers 2]
       [--publish-batch N] [--timeout 1200] [--peer-timeout S] [--smoke]
``--smoke`` (CI): 50 hosts of 4 pages, slow hosts answering after 3 s, Scrapy and crawlee skipped (figures null).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import redis
import yaml
from crawl import ensure_crawlee, tree_cpu_seconds  # beside this file
from harvester_demo import many_hosts
from harvester_demo.many_hosts import CONTROL_ADDRESS, host_address, host_kind
from rig import BIN, ROOT, Processes, bench_processes, start_mongo, start_redis

PROMISED_KEYS = (
    "bench", "hosts", "pages_per_host", "live_pages", "concurrency", "workers", "publish_batch", "scrapy",
    "pages_per_s", "live_only_pages_per_s", "scrapy_pages_per_s", "crawlee_pages_per_s",
    "broad_ratio", "broad_crawlee_ratio", "politeness_violations", "scrapy_politeness_violations",
    "dead_host_cost", "cpu_ms_per_page", "scrapy_cpu_ms_per_page", "crawlee_cpu_ms_per_page",
    "seconds", "live_only_seconds", "scrapy_seconds", "host_unreachable", "peers_skipped",
    "crawlee_politeness_violations", "crawlee_seconds", "peers_timed_out",
)
SCRAPY_VERSION = "2.19.0"  # bench/requirements.txt
PER_MINUTE = 30


def ensure_scrapy() -> Path:
    """Scrapy in a bench-only directory (never .venv), constrained by our lock."""
    target = ROOT / "var" / "bench-peers" / f"scrapy-{SCRAPY_VERSION}"
    if not (target / "scrapy").is_dir():
        subprocess.run([str(BIN / "pip"), "install", "-q", "--target", str(target), "-c",
                        str(ROOT / "requirements.lock"), f"scrapy=={SCRAPY_VERSION}"], check=True)
    return target


class Web:
    """The loopback web process and what it counted."""

    def __init__(self, processes: Processes, hosts: int, slow_seconds: float, live_only: bool) -> None:
        from harvester.services import readiness
        from harvester.services.ports import free_ports

        self.port, self.control_port = free_ports(2)
        command = [sys.executable, "-m", many_hosts.__name__, "--hosts", str(hosts), "--port",
                   str(self.port), "--control-port", str(self.control_port), "--per-minute", str(PER_MINUTE),
                   "--slow-seconds", str(slow_seconds)]
        self.process = processes.start("web-live" if live_only else "web", command + (["--live-only"] * live_only))
        readiness.wait_until(lambda: readiness.tcp_open(CONTROL_ADDRESS, self.control_port), 60, "loopback web")

    def _call(self, path: str, method: str = "GET") -> dict[str, Any]:
        request = urllib.request.Request(f"http://{CONTROL_ADDRESS}:{self.control_port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        return self._call("/_stats")

    def reset(self) -> None:
        self._call("/_reset", "POST")


def page_urls(port: int, hosts: int, pages: int) -> list[str]:
    """Host by host, as a broad input is usually written."""
    return [f"http://{host_address(index)}:{port}/page/{page}" for index in range(hosts) for page in range(pages)]


def write_source(directory: Path, concurrency: int, first_url: str) -> Path:
    document = {
        "name": "broad",
        "input": {"seeds": [first_url], "kind": "details"},
        "attributes": {"title": {"css": "h1::text"}, "price": {"css": ".price::text"}},
        "rate_limit": {"max_active": concurrency, "per_minute": 1_000_000, "per_host_max_active": 1,
                       "per_host_per_minute": PER_MINUTE},
        "retries": 2, "timeout": 30,
    }
    path = directory / "broad.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


class NotAllServed(RuntimeError):
    """A crawler that did not fetch every live page within the timeout; ``stats`` is the web's count then."""

    def __init__(self, timeout: float, stats: dict[str, Any]) -> None:
        super().__init__(f"live pages not all served within {timeout:.0f}s: {stats}")
        self.stats = stats


def wait_for_live_pages(web: Web, live_pages: int, timeout: float, processes: list[subprocess.Popen],
                        started: float) -> float:
    """Once the web served every live page: the seconds from the first request it saw to the last live page
    (``live_span``, the server's clock, so no crawler's start-up counts). ``started``: ``time.perf_counter``."""
    while time.perf_counter() - started < timeout:
        stats = web.stats()
        if stats["served"].get("normal", 0) >= live_pages:
            return float(stats["live_span"])
        if any(process.poll() is not None for process in processes):
            break
        time.sleep(0.1)
    raise NotAllServed(timeout, web.stats())


def run_harvester(processes: Processes, env: dict[str, str], source_path: Path, urls: list[str], web: Web,
                  live_pages: int, workers: int, timeout: float) -> dict[str, Any]:
    from harvester.config.loader import load_source_file
    from harvester.distributor import Intake, RateLimitStore, TaskMessage
    from harvester.settings import HarvesterSettings

    settings = HarvesterSettings(**{key[len("HARVESTER_"):].lower(): value for key, value in env.items()
                                    if key.startswith("HARVESTER_")})
    source = load_source_file(source_path)
    client = redis.Redis.from_url(settings.redis_url)
    client.flushall()
    worker = processes.start("celery", [
        str(BIN / "celery"), "-A", "harvester.workers.celery_app", "worker", "-Q", "default", "-n", "broad@%h",
        "--concurrency", str(workers), "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
        "--without-heartbeat"], env)
    distributor = processes.start("distributor", [str(BIN / "harvester"), "distributor"], env)
    time.sleep(4)  # workers and the distributor start (not part of the measurement)
    web.reset()
    cpu_before = tree_cpu_seconds([worker, distributor])
    started = time.perf_counter()
    Intake(client, settings).push(source, [TaskMessage(source="broad", url=url) for url in urls])
    seconds = wait_for_live_pages(web, live_pages, timeout, [worker, distributor], started)
    cpu_seconds = tree_cpu_seconds([worker, distributor]) - cpu_before
    counters = RateLimitStore(client, settings).counters("broad")
    observed = web.stats()
    processes.stop(distributor)
    processes.stop(worker)
    client.close()
    print(f"harvester: {live_pages} live pages in {seconds:.1f} s ({live_pages / seconds:.2f} pages/s), "
          f"{cpu_seconds:.1f} s CPU, {observed['violations']} politeness violations", file=sys.stderr)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "violations": observed["violations"],
            "host_unreachable": counters.get("outcome:host_unreachable", 0), "served": observed["served"]}


def run_scrapy(processes: Processes, peer: Path, urls: list[str], web: Web, live_pages: int, concurrency: int,
               timeout: float) -> dict[str, Any]:
    url_file = processes.directory / "urls.json"
    url_file.write_text(json.dumps(urls))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(peer), os.environ.get("PYTHONPATH", "")])}
    return run_peer(processes, "scrapy", [sys.executable, str(ROOT / "bench" / "broad_scrapy_peer.py"), "--urls",
                                          str(url_file), "--concurrency", str(concurrency)], env, web, live_pages,
                    timeout)


def run_crawlee(processes: Processes, peer: Path, urls: list[str], web: Web, live_pages: int, concurrency: int,
                timeout: float) -> dict[str, Any]:
    url_file = processes.directory / "urls.json"
    url_file.write_text(json.dumps(urls))
    env = {**os.environ, "CRAWLEE_STORAGE_DIR": str(processes.directory / "crawlee-storage")}  # never the repository
    return run_peer(processes, "crawlee", [sys.executable, str(ROOT / "bench" / "broad_crawlee_peer.py"),
                                           "--peer-path", str(peer), "--urls", str(url_file),
                                           "--concurrency", str(concurrency)], env, web, live_pages, timeout)


def run_peer(processes: Processes, name: str, command: list[str], env: dict[str, str], web: Web, live_pages: int,
             timeout: float) -> dict[str, Any]:
    """One peer's crawl of the web, timed by the server until every live page was served. A peer still short of
    them at the timeout is stopped and measured on what it served (its pace over the whole timeout, ``finished``
    false), so a peer too slow for the web costs the run its own figures' completeness, not everyone's."""
    web.reset()
    started = time.perf_counter()
    process = processes.start(name, command, env)
    finished, pages = True, live_pages
    try:
        seconds = wait_for_live_pages(web, live_pages, timeout, [process], started)
    except NotAllServed as short:
        if process.poll() is not None:  # the peer crashed: no figure to give
            raise
        finished, pages, seconds = False, short.stats["served"].get("normal", 0), float(short.stats["live_span"])
    cpu_seconds = tree_cpu_seconds([process])
    observed = web.stats()
    processes.stop(process)
    run = {"seconds": seconds, "cpu_seconds": cpu_seconds, "violations": observed["violations"],
           "served": observed["served"], "pages": pages, "finished": finished}
    print(f"{name}: {pages} live pages in {seconds:.1f} s ({pages / seconds:.2f} pages/s), finished {finished}, "
          f"{cpu_seconds:.1f} s CPU, {observed['violations']} politeness violations", file=sys.stderr)
    return run


def per_page_ms(run: dict[str, Any] | None, pages: int) -> float | None:
    """CPU per live page: a peer stopped at the timeout counts the pages it served."""
    return None if run is None else round(run["cpu_seconds"] * 1000 / run.get("pages", pages), 2)


def pace(run: dict[str, Any] | None, live_pages: int) -> float | None:
    """Live pages a second: all of them over the run's span, or what a peer stopped at the timeout served."""
    return None if run is None else run.get("pages", live_pages) / run["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--publish-batch", type=int, default=None,
                        help="tasks per Celery message (HARVESTER_PUBLISH_BATCH_SIZE); default: Harvester's own")
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--peer-timeout", type=float, default=None,
                        help="seconds a peer may take before it is measured on what it served (default --timeout)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    peer_timeout = args.timeout if args.peer_timeout is None else args.peer_timeout
    slow_seconds = 10.0
    if args.smoke:
        args.hosts, args.pages, args.concurrency, args.workers, slow_seconds = 50, 4, 16, 1, 3.0
    live_hosts = sum(host_kind(index) == "normal" for index in range(args.hosts))
    live_pages = live_hosts * args.pages

    with bench_processes("broad") as processes:
        redis_url = start_redis(processes)
        mongo, _ = start_mongo(processes)
        env = {**os.environ, "HARVESTER_REDIS_URL": redis_url, "HARVESTER_MONGO_URI": mongo.uri,
               "HARVESTER_MONGO_DATABASE": "harvester_bench_broad", "HARVESTER_SOURCES_DIR": str(processes.sources),
               "HARVESTER_OUTPUT_SINK": "discard", "HARVESTER_ALLOWED_PRIVATE_NETWORKS": many_hosts.NETWORK}
        if args.publish_batch is not None:
            env["HARVESTER_PUBLISH_BATCH_SIZE"] = str(args.publish_batch)
        web = Web(processes, args.hosts, slow_seconds, live_only=False)
        urls = page_urls(web.port, args.hosts, args.pages)
        source_path = write_source(processes.sources, args.concurrency, urls[0])
        ours = run_harvester(processes, env, source_path, urls, web, live_pages, args.workers, args.timeout)
        scrapy = crawlee = None
        if not args.smoke:
            scrapy = run_scrapy(processes, ensure_scrapy(), urls, web, live_pages, args.concurrency, peer_timeout)
            crawlee = run_crawlee(processes, ensure_crawlee()[1], urls, web, live_pages, args.concurrency,
                                  peer_timeout)
        processes.stop(web.process)

        live_web = Web(processes, args.hosts, slow_seconds, live_only=True)
        live_urls = [url for index, url in enumerate(page_urls(live_web.port, args.hosts, args.pages))
                     if host_kind(index // args.pages) == "normal"]
        source_path = write_source(processes.sources, args.concurrency, live_urls[0])
        live_only = run_harvester(processes, env, source_path, live_urls, live_web, live_pages, args.workers,
                                  args.timeout)

    rate = live_pages / ours["seconds"]
    scrapy_rate, crawlee_rate = pace(scrapy, live_pages), pace(crawlee, live_pages)
    print(json.dumps({
        "bench": "broad", "hosts": args.hosts, "pages_per_host": args.pages, "live_pages": live_pages,
        "concurrency": args.concurrency, "workers": args.workers,
        "publish_batch": args.publish_batch, "scrapy": None if scrapy is None else SCRAPY_VERSION,
        "pages_per_s": round(rate, 2), "live_only_pages_per_s": round(live_pages / live_only["seconds"], 2),
        "scrapy_pages_per_s": None if scrapy_rate is None else round(scrapy_rate, 2),
        "crawlee_pages_per_s": None if crawlee_rate is None else round(crawlee_rate, 2),
        "broad_ratio": None if scrapy_rate is None else round(rate / scrapy_rate, 3),
        "broad_crawlee_ratio": None if crawlee_rate is None else round(rate / crawlee_rate, 3),
        "politeness_violations": ours["violations"] + live_only["violations"],
        "scrapy_politeness_violations": None if scrapy is None else scrapy["violations"],
        "dead_host_cost": round(ours["seconds"] / live_only["seconds"], 3),
        "cpu_ms_per_page": per_page_ms(ours, live_pages), "scrapy_cpu_ms_per_page": per_page_ms(scrapy, live_pages),
        "crawlee_cpu_ms_per_page": per_page_ms(crawlee, live_pages),
        "crawlee_politeness_violations": None if crawlee is None else crawlee["violations"],
        "crawlee_seconds": None if crawlee is None else round(crawlee["seconds"], 2),
        "seconds": round(ours["seconds"], 2), "live_only_seconds": round(live_only["seconds"], 2),
        "scrapy_seconds": None if scrapy is None else round(scrapy["seconds"], 2),
        "host_unreachable": ours["host_unreachable"],
        "peers_skipped": ["scrapy", "crawlee"] if args.smoke else [],
        "peers_timed_out": [name for name, run in (("scrapy", scrapy), ("crawlee", crawlee))
                            if run is not None and not run["finished"]],
    }))


if __name__ == "__main__":
    main()
