"""Re-extraction's archived pages read with the source's config, in worker processes forked for the run.

A re-extraction sends no request: nothing but CPU bounds it (parsing and extracting each page, about 0.3 ms for a
demo page, 6 ms and more for a real product page), and a harvest's worker processes are not there to share it
(it runs in one Airflow task or one ``harvester reextract``). So its pages are read by ``reextract_processes``
processes (one per CPU by default), while the re-extraction's own process reads the next pages from the WARC
files, writes the records and follows the links. Nutch's ``parse`` of stored segments is a parallel job for the
same reason.

Why ``concurrent.futures`` with ``fork`` and not ``spawn`` or ``forkserver``: the children inherit the validated
config, the settings and every imported module, so a pool is ready in milliseconds where a fresh interpreter
imports lxml, parsel and the config for about a second (more than a window of a few thousand demo pages takes).
A child only parses and extracts: it touches none of the parent's clients (MongoDB, Redis) nor its threads' locks.
Where ``fork`` is missing, in a daemonic process (which may not have children), or for a window under
:data:`POOL_FROM_PAGES` pages, the pages are read in this process. A child that dies (killed, out of memory) costs
nothing but time: its chunk, and every later one, is read here.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from harvester.config import SourceConfig
from harvester.scraping import (
    DEFAULT_CLASSIFIER,
    ExtractionTally,
    FetchResult,
    PageResult,
    decode_text,
    process_page,
)
from harvester.settings import HarvesterSettings
from harvester.storage import ArchivedResponse, validators_of

log = logging.getLogger(__name__)

POOL_FROM_PAGES = 200  # a smaller window is read in this process: a pool's start costs about what 50 pages do
PARENT_CHECK_SECONDS = 1.0  # how soon a page reader whose parent was killed ends
PAGES_PER_TASK = 25  # pages a child reads per task: small enough to share a chunk evenly, large enough to pay the
# hand-off (about 0.1 ms a task)

# (url, kind, depth, the archived response): what a child needs of an index row to read its page
ArchivedPageWork = tuple[str, str, int, ArchivedResponse]


@dataclass(slots=True)
class ReadPage:
    """What one archived page gave: the outcomes to count, the run's quality figures, the records to write and the
    links to follow in the archive (small: sent back from a child rather than the page and its parsed tree).
    ``gone``: the record URL and why, when the page says its item is gone (a 404 or 410, a soft 404, a redirect
    away): the record is marked as a harvest marks it. ``not_the_page``: when the archived response was not the
    page (a block or a challenge, a 5xx, a 429), the URL and when it was archived, so the one archived before it
    is read instead."""

    outcomes: list[str]
    figures: Counter[str]
    records: list[dict[str, Any]]
    links: list[str]
    gone: tuple[str, str] | None = None
    not_the_page: tuple[str, datetime] | None = None


def archived_fetch(source: SourceConfig, archived: ArchivedResponse) -> FetchResult:
    """The archived response as the fetcher would have given it: classified by its status and type as the fetcher
    classifies what arrives (a 410 is ``http_error``, a 403 ``blocked``), with its decoded text and validators."""
    headers = {name.lower(): value for name, value in archived.headers}
    content_type = headers.get("content-type", "")
    classified = DEFAULT_CLASSIFIER.classify(archived.status, headers, content_type, source.content)
    fetch = FetchResult(archived.url, classified.outcome, final_url=archived.final_url, status=archived.status,
                        content_type=content_type, size=len(archived.body), reason=classified.reason,
                        retry_after=classified.retry_after, etag=headers.get("etag", ""),
                        last_modified=headers.get("last-modified", ""))
    if fetch.ok:
        fetch.text = decode_text(archived.body, content_type)
    return fetch


def extraction_figures(page: PageResult) -> Counter[str]:
    """The page's share of the run's quality figures, counted as a harvest's batch counts them
    (:class:`ExtractionTally`: records extracted, each attribute seen and present, rejections and problems)."""
    tally = ExtractionTally()
    extractions = ([page.extraction] if page.extraction is not None
                   else list(page.listing_records.extractions) if page.listing_records is not None else [])
    for extraction in extractions:
        tally.add(None, extraction)
    return tally.by_run[None]


def page_records(page: PageResult) -> list[dict[str, Any]]:
    """The page's records, a detail page's with its HTTP validators (as a harvest stores them)."""
    records = page.records
    if page.kind != "details":
        return records
    validators = validators_of(page.fetch.etag, page.fetch.last_modified, page.fetch.size)
    return records if validators is None else [{**record, "_http": validators} for record in records]


def read_page(source: SourceConfig, settings: HarvesterSettings, work: ArchivedPageWork) -> ReadPage:
    """One archived page through the current config's extraction, as its task read it when it was fetched."""
    url, kind, depth, archived = work
    page = process_page(source, kind, url, depth, archived_fetch(source, archived), settings=settings)
    if page.gone is not None:
        return ReadPage(["pages_read", "gone"], Counter(), [], [], gone=(page.url, page.gone))
    if not page.fetch.ok:
        return ReadPage(["pages_read", page.fetch.counter], Counter(), [], [], not_the_page=(url, archived.time))
    rejected = page.extraction is not None and page.extraction.record is None
    links = [*page.discovery.details, *page.discovery.listings] if page.discovery is not None else []
    return ReadPage(["pages_read", "rejected"] if rejected else ["pages_read"], extraction_figures(page),
                    page_records(page), links)


_CHILD_SOURCE: tuple[SourceConfig, HarvesterSettings] | None = None  # a child's, from the pool's start (forked)


def _adopt(source: SourceConfig, settings: HarvesterSettings) -> None:
    """A child's start: the config, and the objects inherited from the parent frozen (kept out of the child's
    garbage collections, which would otherwise walk the parent's whole heap, copying each page they touch).

    A child ends with its parent: ``concurrent.futures``' children wait on their task queue, whose writing end
    they inherited too, so a parent killed outright (``kill -9``, the out-of-memory killer, an Airflow task's
    process killed) would leave them waiting for ever; a thread of the child's own sees the parent gone (the
    child adopted by another) within :data:`PARENT_CHECK_SECONDS`. Ctrl-C reaches the whole process group: the
    re-extraction's own process handles it, and its children end when it shuts them down."""
    global _CHILD_SOURCE
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with, args=(os.getppid(),), name="harvester-page-reader-parent",
                     daemon=True).start()
    _CHILD_SOURCE = (source, settings)


def _end_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(1)


def _read_in_child(works: list[ArchivedPageWork]) -> list[ReadPage]:
    assert _CHILD_SOURCE is not None, "a page reader's child reads only after the pool's start"
    source, settings = _CHILD_SOURCE
    return [read_page(source, settings, work) for work in works]


def pool_processes(wanted: int) -> int:
    """How many processes a re-extraction's pages may be read in: ``wanted`` (0: one per CPU), or 1 (this
    process) where a pool cannot start."""
    if "fork" not in multiprocessing.get_all_start_methods() or multiprocessing.current_process().daemon:
        return 1
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return wanted or available


class PageReaders:
    """Reads chunks of archived pages of one source: in ``processes`` forked children, or here (1). A chunk is
    started (:meth:`start`) and its pages' results taken later, in order, so the caller reads the next chunk's
    records meanwhile. Used as a context manager: the children end with it."""

    def __init__(self, source: SourceConfig, settings: HarvesterSettings, processes: int) -> None:
        self.source = source
        self.settings = settings
        self.processes = processes
        self.lost = False  # a child died: the rest was read in this process
        self._executor: Executor | None = None

    def __enter__(self) -> PageReaders:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def start(self, works: Sequence[ArchivedPageWork]) -> Callable[[], list[ReadPage]]:
        """Start reading ``works``; what it returns gives their results, in order (waiting for them)."""
        if self.processes <= 1 or not works:
            return lambda: [read_page(self.source, self.settings, work) for work in works]
        if self._executor is None:
            self._executor = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("fork"),
                                                 initializer=_adopt, initargs=(self.source, self.settings))
        try:
            futures = [self._executor.submit(_read_in_child, list(works[start:start + PAGES_PER_TASK]))
                       for start in range(0, len(works), PAGES_PER_TASK)]
        except BrokenProcessPool as error:
            return self._read_here(works, error)
        return lambda: self._results(futures, works)

    def _results(self, futures: list[Future[list[ReadPage]]], works: Sequence[ArchivedPageWork]) -> list[ReadPage]:
        try:
            return [page for future in futures for page in future.result()]
        except Exception as error:  # the pool's failure (a child died, a result that could not be sent back):
            return self._read_here(works, error)()  # read here, where a page's own error would raise as it does

    def _read_here(self, works: Sequence[ArchivedPageWork], error: Exception) -> Callable[[], list[ReadPage]]:
        """The pool failed (a child killed or out of memory, ``BrokenProcessPool``; the pool shut down for that
        while this chunk waited, ``CancelledError``; a result it could not send): this chunk and every later one
        are read in this process."""
        if self.processes > 1:
            log.warning("%s: a re-extraction's page readers failed (%s: %s): their pages, and the rest, are read in "
                        "the re-extraction's own process", self.source.name, type(error).__name__, error)
            self.processes, self.lost = 1, True
            self.close()
        return lambda: [read_page(self.source, self.settings, work) for work in works]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
