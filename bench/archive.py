"""The WARC archive's cost, and re-extraction's speed over it, in one run.

Starts its own redis-server, MongoDB (HARVESTER_MONGO_URI, else mongod, else the SecantusDB stand-in) and demo
site on free loopback ports, then crawls the same product pages through the worker's batch pipeline (the code a
Celery worker runs: admission, fetch, extraction, settling; records to the discard sink, so the figure is the
crawl's) alternately with the archive on and off (file storage in the bench's directory):

- ``archive_cpu_overhead``: this process's CPU per page with the archive on over the same with it off, minus 1
  (goal <= 0.10), over every round (the CPU of all "on" crawls over that of all "off" crawls): each round runs
  both back to back, neither always first, and no round is chosen. The machine's speed swings between rounds
  (a round's CPU a page varied 0.8-1.4 ms with nothing else running, 2026-12-06), so the figure of one round, or
  of the best round of each side (``archive_cpu_overhead_best``, this key's meaning until 2026-12-06: two lucky
  draws, whose ratio swung by +-0.15 between runs of the same code), says little;
- ``archive_cpu_overhead_direct``: the archive's own code timed where it runs, over the same rounds: the CPU of the
  worker's archive step in the batch's thread (``PageArchive.keep``: records, digests, the payload filter, index
  rows, the hand-over) and of the archive's threads (the writer's storage steps and flushes, the filter's builds),
  over the "off" rounds' CPU. What it leaves out is what the archive costs the rest of the crawl (the fetcher's
  ``Exchange``, caches the archive's code evicts) and the machine's swings between the two sides (timed so in
  scratch drivers on 2 vCPUs: 116-135 µs a page in the batch's thread and 19-22 in the writer's, against 1.6-2.0
  ms of crawl, while ``archive_cpu_overhead`` read 0.09-0.14, 2026-12-07);
- ``archive_cpu_overhead_median``: the same ratio taken in each round, the median of the rounds;
  ``cpu_ms_per_page_by_round`` each round's figures;
- ``archive_cpu_overhead_interleaved``: the same ratio with "on" and "off" batches of 16 interleaved, one of each in
  turns (``--interleaved-pages`` a side, after the rounds): the main thread's CPU of each batch to its side, the
  archive writer thread's to "on" (``archive_writer_cpu_ms_per_page``: since 2026-12-07 only the steps that touch
  the storage or the index, the records being made in the batch's thread), the other threads' half to each. Both
  sides meet the same machine within tens of milliseconds, yet it spreads as much between runs (0.085-0.119 in six
  runs of the same code, 2026-12-07) and read above the rounds' figure in those runs (0.04-0.09); blocks of 8
  batches a side read the same as turns of one, so that is not the archive's code running cold between batches
  of a source without one. Its batches take on no more work while they run (each has 16 pages to itself), so its
  CPU a page is the batch's, above the refilling rounds';
- ``archive_bytes_per_page``: the WARC bytes (gzip per record, request and response) per archived page;
- ``reextract_pages_per_s``: the archived run re-extracted (:class:`harvester.producer.Reextraction`, index,
  WARC reads, extraction; records to the discard sink), pages per second: the median of ``--reextractions``
  re-extractions of it (``reextract_pages_per_s_by_run``; one until 2026-12-07: a single draw of a machine whose
  speed swings by a quarter between seconds);
- ``reextract_speedup``: that over the crawl-only pages per second of the same pages (goal >= 5), the crawl's the
  median of the "off" rounds (``crawl_pages_per_s``; until 2026-12-07 the best of them, now
  ``crawl_pages_per_s_best`` and ``reextract_speedup_over_best``: a best of N rounds against one re-extraction
  read lower the more rounds ran); the CPU per page of both beside them (``cpu_ms_per_page_off``,
  ``reextract_cpu_ms_per_page``: the re-extraction's process and its page readers, ``reextract_reader_processes``
  of them, ``reextract_processes``: one per CPU).

Usage: .venv/bin/python bench/archive.py [--pages 600] [--latency-ms 20] [--rounds 20] [--reextractions 3]
[--interleaved-pages 1600] [--smoke]
``--smoke``: 40 pages, one round, one re-extraction, 32 interleaved pages (checks the bench runs; its figures mean
little). The JSON object on the last line carries every figure and ``mongo`` (which server answered).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rig import (
    DEMO_PRODUCT_ATTRIBUTES,
    Processes,
    bench_processes,
    run_until_idle,
    site_stats,
    start_demo_site,
    start_mongo,
    start_redis,
)

# Every key of the JSON line (tests/test_benches.py runs the bench with --smoke and checks each is there).
PROMISED_KEYS = (
    "pages", "rounds", "archive_cpu_overhead", "archive_cpu_overhead_median", "archive_cpu_overhead_best",
    "archive_cpu_overhead_direct",
    "archive_cpu_overhead_interleaved", "archive_writer_cpu_ms_per_page", "archive_bytes_per_page",
    "crawl_pages_per_s", "crawl_pages_per_s_best",
    "reextract_pages_per_s", "reextract_speedup", "reextract_speedup_over_best", "reextract_records", "mongo",
)


def source_document(name: str, site_url: str, location: Path | None) -> dict[str, Any]:
    archive: dict[str, Any] = {"enabled": location is not None}
    if location is not None:
        archive["location"] = f"file://{location}"
    return {"name": name, "input": {"seeds": [f"{site_url}/product/1"], "kind": "details"},
            "attributes": DEMO_PRODUCT_ATTRIBUTES, "robots": "ignore", "headers": {"X-Demo-Client": name},
            "rate_limit": {"max_active": 16, "per_minute": 1_000_000}, "batch": {"size": 16},
            "harvesting_lag": 0, "output": {"key": ["url"], "archive": archive}}


def children_cpu() -> float:
    """CPU seconds of this process's children that have ended (a re-extraction's page readers, once it returns;
    the bench's servers run on and are not counted)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def writer_cpu() -> float:
    """CPU seconds of the archive's threads so far (its writer, the payload filter's builds, the flush timers)."""
    return sum(time.clock_gettime(time.pthread_getcpuclockid(thread.ident)) for thread in threading.enumerate()
               if thread.name.startswith("harvester-archive") and thread.ident)


class TimedArchiveStep:
    """The worker's archive step (``BatchRunner.archive.keep``: the records, the payload filter, the index rows,
    the hand-over to the writer's thread) with its thread's CPU added up, for ``archive_cpu_overhead_direct``."""

    def __init__(self, keep: Any) -> None:
        self.keep = keep
        self.cpu_seconds = 0.0

    def __call__(self, *arguments: Any) -> Any:
        started = time.thread_time()
        try:
            return self.keep(*arguments)
        finally:
            self.cpu_seconds += time.thread_time() - started


class ArchiveCodeClock:
    """The archive's own code timed where it runs, from now on: the worker's archive step in the batch's thread
    (:class:`TimedArchiveStep`, put in ``runner``'s place) and the archive's threads."""

    def __init__(self, runner: Any) -> None:
        self.step = runner.archive.keep = TimedArchiveStep(runner.archive.keep)
        self.writer_before = writer_cpu()

    def seconds(self) -> float:
        return self.step.cpu_seconds + writer_cpu() - self.writer_before


def alternating(rounds: int) -> Iterator[tuple[int, str]]:
    """Each round's two crawls, (round, "off" or "on"): neither side always goes first."""
    for round_number in range(rounds):
        for mode in ("off", "on") if round_number % 2 == 0 else ("on", "off"):
            yield round_number, mode


def written_source(directory: Path, document: dict[str, Any]) -> Any:
    """A source document written where the workers read sources (the bench's ``sources``), and its config."""
    import yaml
    from harvester.config import SourceConfig

    (directory / "sources" / f"{document['name']}.yaml").write_text(yaml.safe_dump(document))
    return SourceConfig.model_validate(document)


def crawl_environment(processes: Processes, redis_url: str, mongo_uri: str, site_port: int) -> None:
    """What a crawl in this process reads: the bench's Redis, MongoDB and sources, records to the discard sink (the
    figure is the crawl's), the archive under the bench's directory, the site's port allowed."""
    os.environ.update({"HARVESTER_REDIS_URL": redis_url, "HARVESTER_MONGO_URI": mongo_uri,
                       "HARVESTER_SOURCES_DIR": str(processes.sources), "HARVESTER_OUTPUT_SINK": "discard",
                       "HARVESTER_ARCHIVE_LOCATION": f"file://{processes.directory / 'warc'}",
                       "HARVESTER_ALLOWED_PRIVATE_NETWORKS": f"127.0.0.1/32:{site_port}"})


def crawl(runner: Any, redis_client: Any, source: Any, urls: list[str], run_id: str) -> tuple[float, float]:
    """Push every URL, then run batches of 16 until the source is idle: (wall seconds, CPU seconds)."""
    from harvester.distributor import Intake, RateLimitStore, TaskMessage

    intake, store = Intake(redis_client, runner.settings), RateLimitStore(redis_client, runner.settings)
    intake.push(source, [TaskMessage(source=source.name, kind="details", url=url, run_id=run_id) for url in urls])
    wall, cpu = time.perf_counter(), time.process_time()
    run_until_idle(runner, store, source.name, 0.01)
    return time.perf_counter() - wall, time.process_time() - cpu


def interleaved(runner: Any, redis_client: Any, site_url: str, directory: Path, urls: list[str]) -> dict[str, float]:
    """The archive's CPU a page with "on" and "off" batches of 16 pages interleaved (one of each, in turns), so
    both meet the same machine: the main thread's CPU of each batch goes to its side, the archive writer's thread's
    whole CPU to "on", the other threads' (heartbeats, clients' monitors) half to each."""
    from harvester.distributor import Intake, RateLimitStore, TaskMessage

    sources = {mode: written_source(directory, source_document(f"interleaved_{mode}", site_url,
                                                                directory / "warc" if mode == "on" else None))
               for mode in ("on", "off")}
    intake, store = Intake(redis_client, runner.settings), RateLimitStore(redis_client, runner.settings)
    main_cpu, pages = {"on": 0.0, "off": 0.0}, {"on": 0, "off": 0}
    writer_before, process_before, main_before = writer_cpu(), time.process_time(), time.thread_time()
    for turn, start in enumerate(range(0, len(urls), 16)):
        chunk = urls[start:start + 16]
        for mode in ("on", "off") if turn % 2 == 0 else ("off", "on"):
            source = sources[mode]
            intake.push(source, [TaskMessage(source=source.name, kind="details", url=url, run_id="interleaved")
                                 for url in chunk])
            started = time.thread_time()
            run_until_idle(runner, store, source.name, 0.002)
            main_cpu[mode] += time.thread_time() - started
            pages[mode] += len(chunk)
    writer = writer_cpu() - writer_before
    others = (time.process_time() - process_before) - (time.thread_time() - main_before) - writer
    on = (main_cpu["on"] + writer + others / 2) / pages["on"]
    off = (main_cpu["off"] + others / 2) / pages["off"]
    return {"archive_cpu_overhead_interleaved": round(on / off - 1, 4),
            "archive_writer_cpu_ms_per_page": round(1000 * writer / pages["on"], 4),
            "cpu_ms_per_page_interleaved": {"on": round(1000 * on, 4), "off": round(1000 * off, 4)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20,
                        help="rounds of each side (archive_cpu_overhead spread +-0.05 between runs at 10; the crawl's "
                             "pages/s is their median, so more rounds do not lower reextract_speedup)")
    parser.add_argument("--reextractions", type=int, default=3,
                        help="re-extractions of the archived run (reextract_pages_per_s: their median)")
    parser.add_argument("--interleaved-pages", type=int, default=1600,
                        help="pages of each side in the interleaved measure (archive_cpu_overhead_interleaved)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the bench's directory (logs, WARC files)")
    args = parser.parse_args()
    if args.smoke:
        args.pages, args.rounds, args.reextractions, args.interleaved_pages = 40, 1, 1, 32
    with bench_processes("archive", keep=args.keep) as processes:
        redis_url = start_redis(processes)
        mongo, _ = start_mongo(processes)
        _, site_port, site_url = start_demo_site(processes, "--products", str(max(args.pages, args.interleaved_pages)),
                                                 "--latency-ms",
                                         str(args.latency_ms), "--slow-every", "0")
        crawl_environment(processes, redis_url, mongo.uri, site_port)
        figures = run_rounds(args, site_url, processes.directory)
        figures["mongo"] = mongo.kind
    print(json.dumps(figures))


def run_rounds(args: argparse.Namespace, site_url: str, directory: Path) -> dict[str, Any]:
    from harvester.config import SourceConfig
    from harvester.connections import REDIS_DEFAULT, redis_client
    from harvester.producer import Reextraction
    from harvester.settings import get_settings
    from harvester.workers.batch import BatchRunner, freeze_startup_objects

    settings = get_settings()
    client = redis_client(REDIS_DEFAULT, settings=settings)
    urls = [f"{site_url}/product/{number}" for number in range(1, args.pages + 1)]
    runner = BatchRunner(settings)
    best: dict[str, tuple[float, float]] = {}
    per_round: list[dict[str, float]] = []  # each round's CPU seconds, on and off
    off_walls: list[float] = []  # each "off" round's wall seconds (the crawl's pages/s: their median)
    archived: tuple[SourceConfig, str] | None = None
    warc = directory / "warc"
    try:
        warm = written_source(directory, source_document("archive_warm", site_url, None))
        crawl(runner, client, warm, urls[: min(len(urls), 32)], "warm")  # imports, connections: before any round
        freeze_startup_objects()  # as a Celery worker process does once it is ready (harvester.workers.tasks)
        clock = ArchiveCodeClock(runner)
        for round_number, mode in alternating(args.rounds):
            if len(per_round) == round_number:  # the round's first crawl
                per_round.append({})
            name = f"archive_{mode}_{round_number}"
            source = written_source(directory, source_document(name, site_url, warc if mode == "on" else None))
            wall, cpu = crawl(runner, client, source, urls, f"run-{round_number}")
            if site_stats(site_url, name)["total"] < len(urls):
                sys.exit(f"{name}: the site saw {site_stats(site_url, name)} for {len(urls)} pages")
            per_round[-1][mode] = cpu
            if mode == "off":
                off_walls.append(wall)
            if mode not in best or cpu < best[mode][1]:
                best[mode] = (wall, cpu)
            if mode == "on":
                archived = (source, f"run-{round_number}")
        assert archived is not None
        source, run_id = archived
        runner.archive.flush()  # the index rows the last rounds left waiting (archive_index_flush_seconds): all read
        archive_code_cpu = clock.seconds()
        requests_before = site_stats(site_url, source.name)["total"]
        reextractions: list[tuple[float, float, dict[str, Any]]] = []  # (wall, CPU seconds, report) of each
        for _ in range(max(1, args.reextractions)):
            started, cpu_started = time.perf_counter(), time.process_time() + children_cpu()
            report = Reextraction.from_settings(settings).run(source, archived_run=run_id)
            reextractions.append((time.perf_counter() - started,
                                  time.process_time() + children_cpu() - cpu_started,  # its page readers' too
                                  report))
        if site_stats(site_url, source.name)["total"] != requests_before:
            sys.exit("the re-extraction reached the site")
        measured = interleaved(runner, client, site_url, directory,
                               [f"{site_url}/product/{number}" for number in range(1, args.interleaved_pages + 1)])
    finally:
        runner.close()
    pages = len(urls)
    warc_bytes = sum(path.stat().st_size for path in warc.rglob(f"{source.name}/**/*.warc.gz"))
    crawl_pages_per_s = pages / statistics.median(off_walls)
    crawl_pages_per_s_best = pages / best["off"][0]
    by_run = sorted(reextractions, key=lambda run: run[2].get("pages_read", 0) / run[0])
    reextract_seconds, reextract_cpu, report = by_run[len(by_run) // 2]  # the median run (of an odd number)
    reextract_pages_per_s = report.get("pages_read", 0) / reextract_seconds
    return {
        "pages": pages, "rounds": args.rounds, "latency_ms": args.latency_ms,
        "cpu_ms_per_page_off": round(1000 * best["off"][1] / pages, 3),
        "cpu_ms_per_page_on": round(1000 * best["on"][1] / pages, 3),
        "archive_cpu_overhead": round(sum(cpu["on"] for cpu in per_round) / sum(cpu["off"] for cpu in per_round) - 1,
                                      4),
        "archive_cpu_overhead_best": round(best["on"][1] / best["off"][1] - 1, 4),
        "archive_cpu_overhead_direct": round(archive_code_cpu / sum(cpu["off"] for cpu in per_round), 4),
        "archive_cpu_overhead_median": round(statistics.median(cpu["on"] / cpu["off"] - 1 for cpu in per_round), 4),
        "cpu_ms_per_page_by_round": {mode: [round(1000 * cpu[mode] / pages, 3) for cpu in per_round]
                                     for mode in ("off", "on")},
        "archive_bytes_per_page": round(warc_bytes / pages),
        "crawl_pages_per_s": round(crawl_pages_per_s, 1),
        "crawl_pages_per_s_best": round(crawl_pages_per_s_best, 1),
        "reextract_pages_per_s": round(reextract_pages_per_s, 1),
        "reextract_pages_per_s_by_run": [round(run[2].get("pages_read", 0) / run[0], 1) for run in reextractions],
        "reextract_records": report.get("records_stored", 0),
        "reextract_cpu_ms_per_page": round(1000 * reextract_cpu / max(1, report.get("pages_read", 0)), 3),
        "reextract_reader_processes": report.get("reader_processes", 1),
        "reextract_speedup": round(reextract_pages_per_s / crawl_pages_per_s, 2),
        "reextract_speedup_over_best": round(reextract_pages_per_s / crawl_pages_per_s_best, 2),
        **measured,
    }


if __name__ == "__main__":
    main()
