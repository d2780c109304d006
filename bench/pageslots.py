"""Page slots: one slot's browser through its country's proxy on the demo site, and the allocator.

Starts the demo site and a counting forward proxy (`harvester forward-proxy`) on free loopback ports and
renders the demo's JavaScript product pages in ONE slot browser (:class:`harvester.pageslots.host.SlotBrowser`,
one Chromium, one page reused, launched through the proxy), one page after the other as a slot does:

- ``pages_per_min_per_slot`` with blocking (image, font, media, stylesheet) and without;
- ``proxy_bytes_per_page_blocked`` / ``_unblocked``: bytes that went through the proxy per page, counted
  AT the proxy (requests + responses), and ``bytes_cut`` = 1 - blocked / unblocked;
- ``slot_pss_mb``: PSS of the slot's Chromium process tree plus its Playwright driver after the run;
- ``allocator_ms``: census fold + allocation + preparation for 3000 recent tasks across 50 countries
  (the pure computation each DAG run does after its two Redis reads), median of 20;
- ``crawlee_pages_per_min``, ``ratio`` (ours blocking / crawlee) and ``crawlee_pss_mb``: crawlee-python's
  PlaywrightCrawler (bench/crawlee_playwright_peer.py, in its own venv var/bench-venv, installed from
  bench/requirements-crawlee-playwright.txt on first use) on the same pages through the same proxy, same
  Chromium, same flags, same blocking, one page at a time; its PSS measured the same way (its driver and
  Chromium).
  ``pss_by_kind`` splits both trees (driver, browser, renderer, gpu, utility...); ``*_uss_mb`` is their
  private memory, which other Chromiums on the machine (other test runs) do not shift as they shift PSS.

- on the late pages (``/late/timer`` and ``/late/xhr``: the product written 50-500 ms after ``load``, by a timer
  or by the page's own XHR), ``late_ratio`` = our pages/min with the default readiness rule (every required
  attribute) over crawlee's PlaywrightCrawler waiting with ``wait_for_selector`` for the same selector (the
  price, the last to render), same Chromium, proxy and blocking; ``late_complete_share`` (records with every
  attribute over pages, ours; 1.0 is the goal) and ``late_crawlee_complete_share``, both extracted as a harvest
  extracts (the worst round of each);
- ``context_per_source_ms``: the cost of isolation, a fresh context (page, route, body cap) when another
  source's visit begins, median of 20.
- ``proxy_failover_seconds``: a slot browsing through a pool of two proxies (shared health in a redis-server of
  its own), its context pinned to the first; that proxy is killed, and the time from its death to the first page
  loaded (through the other) is the figure, the worst of ``--rounds`` (the goal: at most 5 s).

The two crawlers run in turn, ours first then crawlee, ``--rounds`` times (best round of each reported).
Usage: .venv/bin/python bench/pageslots.py [--pages 60] [--rounds 2] [--smoke]. The JSON object on the last line
carries every figure. ``--smoke`` (CI: tests/test_benches.py): 3 pages, one round, crawlee skipped (installing
it takes minutes), so its figures and the ratios over them are null.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from fractions import Fraction
from pathlib import Path
from typing import Any

import psutil
from harvester.config.model import SourceConfig
from harvester.pageslots.allocation import allocate_page_slots, page_slots_to_start
from harvester.pageslots.bookkeeping import census_of, country_tasks
from harvester.pageslots.proxies import Proxy
from harvester.scraping import CHROMIUM_ARGS, SLOT_ARGS, FetchResult, SlotBrowser, process_page
from harvester.services import readiness
from harvester.services.ports import LOOPBACK, free_port, free_ports
from harvester.settings import HarvesterSettings
from process_memory import pss_by_kind

# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "pages", "pages_per_min_per_slot", "proxy_bytes_per_page_blocked", "proxy_bytes_per_page_unblocked",
    "proxy_requests_per_page", "bytes_cut", "slot_pss_mb", "allocator_ms", "crawlee_pages_per_min", "ratio",
    "crawlee_pss_mb", "slot_uss_mb", "crawlee_uss_mb", "crawlee_proxy_bytes_per_page", "pss_by_kind", "rounds",
    "late_pages_per_min", "late_crawlee_pages_per_min", "late_ratio", "late_complete_share",
    "late_crawlee_complete_share", "late_slot_pss_mb", "late_crawlee_pss_mb", "context_per_source_ms",
    "late_rounds", "peers_skipped", "load_average", "proxy_failover_seconds",
)
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
CRAWLEE_VENV = ROOT / "var" / "bench-venv"
BLOCKED = ["image", "font", "media", "stylesheet"]
SLOT_CHROMIUM_ARGS = [*CHROMIUM_ARGS, *SLOT_ARGS]  # what crawlee's Chromium is launched with too
LATE_ATTRIBUTES = {"title": {"css": "h1.title::text", "required": True},
                   "sku": {"css": "span.sku::text", "required": True},
                   "price": {"css": "span.price::text", "type": "float", "required": True}}
LATE_SELECTOR = "span.price"  # what the crawlee user waits for: the price, the last of the product to render


def source(base_url: str, blocked: list[str]) -> SourceConfig:
    return SourceConfig.model_validate({
        "name": "bench_pageslots", "render": "browser", "country": "SG",
        "input": {"kind": "details", "seeds": [f"{base_url}/js/product/1"]},
        "attributes": {"sku": {"css": "#app.ready span.sku::text", "required": True}},
        "output": {"key": ["sku"]}, "blocked_resource_types": blocked, "timeout": 30,
    })


def late_source(base_url: str, name: str = "bench_late") -> SourceConfig:
    """The late pages' source: the default readiness rule (every required attribute), nothing else said."""
    return SourceConfig.model_validate({
        "name": name, "render": "browser", "country": "SG",
        "input": {"kind": "details", "seeds": [f"{base_url}/late/timer/1"]},
        "attributes": LATE_ATTRIBUTES, "blocked_resource_types": BLOCKED, "timeout": 30,
    })


def complete_share(config: SourceConfig, pages: dict[str, str]) -> float:
    """Records with every attribute, over pages: extracted as a harvest extracts them."""
    complete = 0
    for url, text in pages.items():
        extraction = process_page(config, "details", url, 0, FetchResult(url, "ok", text=text)).extraction
        record = extraction.record if extraction is not None else None
        complete += record is not None and all(record.get(name) is not None for name in config.attributes)
    return complete / len(pages) if pages else 0.0


def proxy_stats(proxy_url: str, reset: bool = False) -> dict[str, Any]:
    request = urllib.request.Request(f"{proxy_url}/_proxy/{'reset' if reset else 'stats'}",
                                     method="POST" if reset else "GET", data=b"" if reset else None)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=5) as response:
        return json.load(response)


SERVER_PIDS: set[int] = set()  # the demo site and the proxy: not the slot's


def browser_pss_by_kind(root_pid: int) -> dict[str, float]:
    """PSS in MB of this process's children that belong to the browser (driver and Chromium), by kind."""
    servers = set(SERVER_PIDS)
    for pid in SERVER_PIDS:
        try:
            servers |= {child.pid for child in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            continue
    return pss_by_kind(psutil.Process(root_pid), servers)


async def slot_run(settings: HarvesterSettings, proxy_url: str, urls: list[str], config: SourceConfig) -> dict:
    browser = SlotBrowser("bench-SG", Proxy("SG", proxy_url), settings)
    try:
        loaded = await browser.load(urls[0], config)  # launch outside the timing (a slot launches once)
        assert not loaded.load_failed, loaded.fetch.reason
        proxy_stats(proxy_url, reset=True)
        started = time.perf_counter()
        for url in urls:
            loaded = await browser.load(url, config)
            assert loaded.fetch.ok and "SKU-" in loaded.fetch.text, loaded.fetch.reason
        elapsed = time.perf_counter() - started
        seen = proxy_stats(proxy_url)
        kinds = browser_pss_by_kind(os.getpid())
    finally:
        await browser.close()
    uss = kinds.pop("uss", 0.0)
    return {"pages_per_min": 60 * len(urls) / elapsed, "proxy_bytes_per_page": seen["bytes"] / len(urls),
            "proxy_requests_per_page": seen["requests"] / len(urls), "pss_mb": sum(kinds.values()),
            "uss_mb": uss, "pss_by_kind": kinds}


async def late_run(settings: HarvesterSettings, proxy_url: str, urls: list[str], config: SourceConfig) -> dict:
    """The late pages in one slot browser, each read when the default rule says it is ready."""
    browser = SlotBrowser("bench-late", Proxy("SG", proxy_url), settings)
    pages: dict[str, str] = {}
    try:
        loaded = await browser.load(urls[0] + "?warm-up=1", config)  # launch outside the timing, as crawlee's
        assert not loaded.load_failed, loaded.fetch.reason
        started = time.perf_counter()
        for url in urls:
            render = await browser.render(url, config)
            pages[url] = render.fetch.text
        elapsed = time.perf_counter() - started
        kinds = browser_pss_by_kind(os.getpid())
    finally:
        await browser.close()
    uss = kinds.pop("uss", 0.0)
    return {"pages_per_min": 60 * len(urls) / elapsed, "complete_share": complete_share(config, pages),
            "pss_mb": sum(kinds.values()), "uss_mb": uss}


async def context_switch_ms(settings: HarvesterSettings, proxy_url: str, base_url: str, switches: int = 20) -> float:
    """The cost of isolation: a visit of another source closes the context and opens a fresh one (its page,
    route, body cap and headers), median over ``switches`` alternations of two sources."""
    browser = SlotBrowser("bench-isolation", Proxy("SG", proxy_url), settings)
    sources = [late_source(base_url, "bench_visit_a"), late_source(base_url, "bench_visit_b")]
    timings = []
    try:
        await browser.ensure_page(sources[1])
        for index in range(switches):
            started = time.perf_counter()
            await browser.ensure_page(sources[index % 2])
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        await browser.close()
    return statistics.median(timings)


def ensure_crawlee() -> Path:
    """The Python of the crawlee venv, created and filled on first use (never .venv: crawlee pins its own)."""
    python = CRAWLEE_VENV / "bin" / "python"
    probe = [str(python), "-c", "import crawlee.crawlers, playwright, psutil"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(CRAWLEE_VENV)], check=True)
    requirements = ROOT / "bench" / "requirements-crawlee-playwright.txt"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(requirements)], check=True)
    return python


async def failover_seconds(settings: HarvesterSettings, redis_url: str, urls: list[str],
                           config: SourceConfig) -> float:
    """From the death of the proxy a slot's context goes out through to the first page loaded through the other."""
    import redis
    from harvester.pageslots.proxy_pool import HealthTrackedPool, ProxyHealth

    ports = free_ports(2)
    proxies = [subprocess.Popen([str(BIN / "harvester"), "forward-proxy", "--host", LOOPBACK, "--port", str(port),
                                 "--label", f"SG-{index}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for index, port in enumerate(ports, start=1)]
    SERVER_PIDS.update(process.pid for process in proxies)
    client = redis.Redis.from_url(redis_url)
    browser = SlotBrowser("bench-failover", None, settings)
    try:
        for port in ports:
            readiness.wait_until(lambda port=port: readiness.tcp_open(LOOPBACK, port), 30, f"port {port}")
        client.flushdb()
        members = [Proxy("SG", f"http://{LOOPBACK}:{port}", connection_id=name)
                   for port, name in zip(ports, ("proxy_sg", "proxy_sg_2"), strict=True)]
        browser.proxy_pool = HealthTrackedPool("SG", members, ProxyHealth(client))
        loaded = await browser.load(urls[0], config)  # launched, its context pinned to one proxy of the pool
        assert loaded.fetch.ok and browser.visit is not None and browser.visit.exit, loaded.fetch.reason
        doomed = proxies[[member.connection_id for member in members].index(browser.visit.exit)]
        doomed.kill()
        doomed.wait()
        died = time.perf_counter()
        loaded = await browser.load(urls[1 % len(urls)], config)
        assert loaded.fetch.ok and "SKU-" in loaded.fetch.text, loaded.fetch.reason
        return time.perf_counter() - died
    finally:
        await browser.close()
        client.close()
        for process in proxies:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)


def crawlee_run(python: Path, settings: HarvesterSettings, proxy_url: str, urls: list[str], blocked: list[str],
                workdir: Path, wait_selector: str | None = None) -> dict[str, Any]:
    """The same pages through crawlee's PlaywrightCrawler, with one warm-up page it handles first (its
    browser launch stays outside the timing, as ours); with ``wait_selector``, each page waits for it."""
    url_file = workdir / "crawlee-urls.txt"
    url_file.write_text("\n".join([f"{urls[0]}?warm-up=1", *urls]) + "\n")
    html_out = workdir / "crawlee-pages.json"
    command = [str(python), str(ROOT / "bench" / "crawlee_playwright_peer.py"), "--urls", str(url_file),
               "--chromium", str(settings.chromium_executable), "--proxy", proxy_url, "--blocked", ",".join(blocked),
               *(f"--arg={flag}" for flag in SLOT_CHROMIUM_ARGS), *(["--sandbox"] if settings.chromium_sandbox else []),
               *(["--wait-selector", wait_selector, "--html-out", str(html_out)] if wait_selector else [])]
    proxy_stats(proxy_url, reset=True)
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=workdir,
                               env={**os.environ, "CRAWLEE_STORAGE_DIR": str(workdir / "crawlee-storage")})
    if completed.returncode != 0:
        raise RuntimeError(f"the crawlee peer failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-3000:]}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    seen = proxy_stats(proxy_url)
    pages = result["pages"] - 1  # intervals after the warm-up page: len(urls) loads
    run = {"pages_per_min": 60 * pages / result["seconds"], "pss_mb": result["pss_mb"], "uss_mb": result["uss_mb"],
           "pss_by_kind": result["pss_by_kind"], "proxy_bytes_per_page": seen["bytes"] / result["pages"]}
    if wait_selector:
        handled = json.loads(html_out.read_text())
        run["pages_by_url"] = {url: handled[url] for url in urls if url in handled}
    return run


def allocator_ms() -> float:
    rng = random.Random(7)
    countries = [f"{chr(65 + i // 26)}{chr(65 + i % 26)}" for i in range(50)]
    entries = [f"{rng.choice(countries)}|{rng.choice(['pending', 'running', 'completed', 'completed'])}|"
               f"{1000 - rng.random() * 120:.6f}" for _ in range(3000)]
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        census = census_of(entries, 1000.0)
        slots = allocate_page_slots({c: country_tasks(v) for c, v in census.items()}, 20, 50.0)
        page_slots_to_start(slots, {c: v.active for c, v in census.items()}, Fraction(1, 3))
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def rounded(run: dict[str, Any] | None, key: str, digits: int | None = None) -> float | None:
    """``run[key]`` rounded, or None for a peer that did not run (``--smoke``)."""
    return None if run is None else round(run[key], digits)


def ratio(ours: dict[str, Any], peer: dict[str, Any] | None, key: str = "pages_per_min") -> float | None:
    return None if peer is None else round(ours[key] / peer[key], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="3 pages, one round, no crawlee peer (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.pages, args.rounds = 3, 1
    crawlee_python = None if args.smoke else ensure_crawlee()
    workdir = Path(tempfile.mkdtemp(prefix="bench-pageslots-"))
    site_port, proxy_port = free_ports(2)
    processes = [
        subprocess.Popen([str(BIN / "harvester-demo-site"), "--host", LOOPBACK, "--port", str(site_port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([str(BIN / "harvester"), "forward-proxy", "--host", LOOPBACK, "--port", str(proxy_port),
                          "--label", "SG"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    SERVER_PIDS.update(process.pid for process in processes)
    try:
        for port in (site_port, proxy_port):
            readiness.wait_until(lambda port=port: readiness.tcp_open(LOOPBACK, port), 30, f"port {port}")
        base, proxy_url = f"http://{LOOPBACK}:{site_port}", f"http://{LOOPBACK}:{proxy_port}"
        # the browser refuses loopback unless allow-listed: the bench's demo site port only
        settings = HarvesterSettings(allowed_private_networks=f"{LOOPBACK}/32:{site_port}")
        urls = [f"{base}/js/product/{n}" for n in range(1, args.pages + 1)]
        late_urls = [f"{base}/late/{'timer' if n % 2 else 'xhr'}/{n}" for n in range(1, args.pages + 1)]
        unblocked = asyncio.run(slot_run(settings, proxy_url, urls, source(base, [])))
        ours_rounds, crawlee_rounds, late_rounds, late_crawlee_rounds = [], [], [], []
        for _ in range(args.rounds):  # in turn, so both see the same load
            ours_rounds.append(asyncio.run(slot_run(settings, proxy_url, urls, source(base, BLOCKED))))
            if crawlee_python is not None:
                crawlee_rounds.append(crawlee_run(crawlee_python, settings, proxy_url, urls, BLOCKED, workdir))
            late_rounds.append(asyncio.run(late_run(settings, proxy_url, late_urls, late_source(base))))
            if crawlee_python is not None:
                late_crawlee = crawlee_run(crawlee_python, settings, proxy_url, late_urls, BLOCKED, workdir,
                                           LATE_SELECTOR)
                late_crawlee["complete_share"] = complete_share(late_source(base), late_crawlee.pop("pages_by_url"))
                late_crawlee_rounds.append(late_crawlee)
        isolation_ms = asyncio.run(context_switch_ms(settings, proxy_url, base, 3 if args.smoke else 20))
        redis_port = free_port()
        processes.append(subprocess.Popen(["redis-server", "--bind", LOOPBACK, "--port", str(redis_port), "--save",
                                           "", "--appendonly", "no", "--dir", str(workdir)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        SERVER_PIDS.add(processes[-1].pid)
        readiness.wait_until(lambda: readiness.tcp_open(LOOPBACK, redis_port), 30, "redis-server")
        failover = max(asyncio.run(failover_seconds(settings, f"redis://{LOOPBACK}:{redis_port}/0", urls,
                                                    source(base, BLOCKED))) for _ in range(args.rounds))
        blocked = max(ours_rounds, key=lambda run: run["pages_per_min"])
        crawlee = max(crawlee_rounds, key=lambda run: run["pages_per_min"], default=None)
        late = max(late_rounds, key=lambda run: run["pages_per_min"])
        late_crawlee = max(late_crawlee_rounds, key=lambda run: run["pages_per_min"], default=None)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
    result = {
        "pages": args.pages,
        "pages_per_min_per_slot": {"blocking": round(blocked["pages_per_min"]),
                                   "no_blocking": round(unblocked["pages_per_min"])},
        "proxy_bytes_per_page_blocked": round(blocked["proxy_bytes_per_page"]),
        "proxy_bytes_per_page_unblocked": round(unblocked["proxy_bytes_per_page"]),
        "proxy_requests_per_page": {"blocking": blocked["proxy_requests_per_page"],
                                    "no_blocking": unblocked["proxy_requests_per_page"]},
        "bytes_cut": round(1 - blocked["proxy_bytes_per_page"] / unblocked["proxy_bytes_per_page"], 3),
        "slot_pss_mb": round(blocked["pss_mb"], 1),
        "allocator_ms": round(allocator_ms(), 2),
        "crawlee_pages_per_min": rounded(crawlee, "pages_per_min"),
        "ratio": ratio(blocked, crawlee),
        "crawlee_pss_mb": rounded(crawlee, "pss_mb", 1),
        "slot_uss_mb": round(blocked["uss_mb"], 1), "crawlee_uss_mb": rounded(crawlee, "uss_mb", 1),
        "crawlee_proxy_bytes_per_page": rounded(crawlee, "proxy_bytes_per_page"),
        "pss_by_kind": {"slot": blocked["pss_by_kind"], "crawlee": crawlee and crawlee["pss_by_kind"]},
        "rounds": {"slot_pages_per_min": [round(run["pages_per_min"]) for run in ours_rounds],
                   "crawlee_pages_per_min": [round(run["pages_per_min"]) for run in crawlee_rounds],
                   "slot_pss_mb": [round(run["pss_mb"], 1) for run in ours_rounds],
                   "crawlee_pss_mb": [round(run["pss_mb"], 1) for run in crawlee_rounds]},
        "late_pages_per_min": round(late["pages_per_min"]),
        "late_crawlee_pages_per_min": rounded(late_crawlee, "pages_per_min"),
        "late_ratio": ratio(late, late_crawlee),
        "late_complete_share": round(min(run["complete_share"] for run in late_rounds), 3),
        "late_crawlee_complete_share": round(min(run["complete_share"] for run in late_crawlee_rounds), 3)
        if late_crawlee_rounds else None,
        "late_slot_pss_mb": round(late["pss_mb"], 1), "late_crawlee_pss_mb": rounded(late_crawlee, "pss_mb", 1),
        "context_per_source_ms": round(isolation_ms, 1),
        "late_rounds": {"slot_pages_per_min": [round(run["pages_per_min"]) for run in late_rounds],
                        "crawlee_pages_per_min": [round(run["pages_per_min"]) for run in late_crawlee_rounds]},
        "peers_skipped": ["crawlee"] if crawlee_python is None else [],
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "proxy_failover_seconds": round(failover, 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
